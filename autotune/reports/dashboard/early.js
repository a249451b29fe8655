
window.__autotune = {errors: []};
window.addEventListener('error', function (e) {
  var t = e.target;
  var what = (t && t !== window && (t.src || t.href)) ? 'failed to load ' + (t.src || t.href) : String(e.message || e);
  window.__autotune.errors.push(what);
}, true);
window.addEventListener('unhandledrejection', function (e) { window.__autotune.errors.push('unhandled rejection: ' + String(e.reason)); });
if (location.hash === '#selftest') {
  var ce = console.error;
  console.error = function () { window.__autotune.errors.push(Array.prototype.map.call(arguments, String).join(' ')); return ce.apply(console, arguments); };
}
