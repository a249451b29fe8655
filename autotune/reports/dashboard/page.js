
(function () {
  function cellValue(row, i, numeric) {
    var v = row.children[i].getAttribute('data-v');
    if (!numeric) return (v || '').toLowerCase();
    var x = parseFloat(v);
    return isNaN(x) ? -Infinity : x;
  }
  function sortBy(th) {
    var table = th.closest('table'), body = table.tBodies[0], i = Array.prototype.indexOf.call(th.parentNode.children, th);
    var numeric = th.getAttribute('data-type') === 'num', asc = !th.classList.contains('asc');
    Array.prototype.forEach.call(th.parentNode.children, function (h) { h.classList.remove('asc', 'desc'); });
    th.classList.add(asc ? 'asc' : 'desc');
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = cellValue(a, i, numeric), y = cellValue(b, i, numeric);
      return (x < y ? -1 : x > y ? 1 : 0) * (asc ? 1 : -1);
    });
    rows.forEach(function (r) { body.appendChild(r); });
  }
  document.querySelectorAll('table.sortable th').forEach(function (th) { th.addEventListener('click', function () { sortBy(th); }); });

  var figures = JSON.parse(document.getElementById('autotune-figures').textContent);
  var config = {displaylogo: false, responsive: true};
  // plotly.js is embedded compressed (see _plotly_js): unpack it, run it, then draw.
  function unpackPlotly() {
    var packed = atob(document.getElementById('autotune-plotly').textContent), bytes = new Uint8Array(packed.length);
    for (var i = 0; i < packed.length; i++) bytes[i] = packed.charCodeAt(i);
    var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream('gzip'));
    return new Response(stream).text().then(function (source) {
      var script = document.createElement('script');
      script.text = source;
      script.setAttribute('data-unpacked', 'plotly.js');  // the page's own, not counted among its script elements
      document.head.appendChild(script);
    });
  }
  var drawn = (typeof DecompressionStream === 'undefined'
    ? Promise.reject(new Error('this browser cannot unpack the embedded plotly.js (no DecompressionStream): open the page in a current Chrome, Edge, Firefox or Safari'))
    : unpackPlotly()
  ).then(function () {
    return Promise.all(figures.map(function (f) {
      try { return Promise.resolve(Plotly.newPlot(f.id, f.figure.data, f.figure.layout, config)); }
      catch (err) { window.__autotune.errors.push('figure ' + f.id + ': ' + err); return Promise.resolve(); }
    }));
  });
  drawn.catch(function (err) {
    window.__autotune.errors.push('draw: ' + err);
    document.querySelectorAll('.plot').forEach(function (el) { el.textContent = String(err.message || err); });
  });
  if (location.hash !== '#selftest') return;
  drawn.catch(function () {}).then(function () {
    return new Promise(function (resolve) { setTimeout(resolve, 200); });
  }).then(function () {
    function count(el, sel) { return el.querySelectorAll(sel).length; }
    function texts(el, sel) {
      return Array.prototype.map.call(el.querySelectorAll(sel), function (t) { return t.textContent; });
    }
    var plots = Array.prototype.map.call(document.querySelectorAll('.js-plotly-plot'), function (el) {
      var c = {id: el.id, name: el.getAttribute('data-name') || '', points: count(el, '.scatterlayer .point'),
               bars: count(el, '.barlayer .point') + count(el, '.waterfalllayer .point'),
               boxes: count(el, '.boxlayer .point') + count(el, '.boxlayer path.box'),
               lines: count(el, '.scatterlayer .js-line'), parcoords: count(el, '.parcoords .axis'),
               canvases: count(el, 'canvas')};
      c.marks = c.points + c.bars + c.boxes + c.lines + c.parcoords;
      // What a reader sees: tick labels by axis (xtick, x2tick, ytick, ...), annotations, legend entries,
      // and each parallel-coordinates axis with its title and tick labels.
      c.ticks = {};
      el.querySelectorAll('.xaxislayer-above > g, .yaxislayer-above > g').forEach(function (g) {
        var k = g.getAttribute('class');
        (c.ticks[k] = c.ticks[k] || []).push(g.textContent);
      });
      c.annotations = texts(el, '.annotation-text');
      c.legend = texts(el, '.legendtext');
      c.axes = Array.prototype.map.call(el.querySelectorAll('.parcoords .y-axis'), function (a) {
        var title = a.querySelector('.axis-title');
        return {title: title ? title.textContent : '', ticks: texts(a, '.axis .tick text')};
      });
      return c;
    });
    var sorted = null, th = document.querySelector('#front-table th');
    if (th) {
      th.click(); th.click();
      var nums = Array.prototype.map.call(document.querySelectorAll('#front-table tbody tr'), function (r) { return parseFloat(r.children[0].getAttribute('data-v')); });
      sorted = nums.every(function (x, k) { return k === 0 || nums[k - 1] >= x; });
    }
    var canvas = document.createElement('canvas');
    var resources = performance.getEntriesByType('resource').map(function (r) { return r.name; });
    var out = {ready: true, errors: window.__autotune.errors, expected: figures.length, plots: plots, table_sorts: sorted,
               webgl: !!(canvas.getContext('webgl') || canvas.getContext('experimental-webgl')), resources: resources,
               title: document.title, tables: document.querySelectorAll('table').length,
               meta: (document.querySelector('header .meta') || {}).textContent || '',
               cards: texts(document, 'header .card .sub'), hints: texts(document, '.hint'),
               scripts: document.querySelectorAll('script:not([data-unpacked])').length, images: document.querySelectorAll('img').length,
               height: document.body.scrollHeight};
    var pre = document.getElementById('autotune-selftest');
    pre.textContent = JSON.stringify(out);
    pre.hidden = false;
  });
})();
