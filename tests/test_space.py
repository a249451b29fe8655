from __future__ import annotations

import errno
from pathlib import Path

import pytest

import autotune
from autotune import knobs
from autotune.knobs import space
from autotune.errors import SpaceError

SPACES_DIR_IN_PACKAGE = Path(autotune.__file__).resolve().parent / "search_spaces"
CPU4 = knobs.Context(device_type="cpu", task="train", input_rank=4, cpu_count=2)


@pytest.mark.parametrize("name", ["default", "cnn", "transformer", "inference", "cpu", "launch"])
def test_builtin_spaces_load(name):
    s = space.load(name)
    assert s.search and s.name == name
    assert all(k in knobs.KNOBS for k in s.search)


def write(tmp_path, text: str):
    path = tmp_path / "space.toml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    "text, message",
    [
        ("[search]\nprecison = ['bf16']\n", "unknown knob 'precison'"),
        ("[search]\nprecision = ['bf17']\n", "'bf17' is not one of"),
        ("[search]\nprecision = ['bf16'\n", "TOML syntax error"),
        ("[search]\nbatch_size = { low = 64, high = 8 }\n", "low 64 is above high 8"),
        ("[search]\nprecision = { low = 1, high = 2 }\n", "takes a list of values, not a range"),
        ("[search]\nprecision = []\n", "empty"),
        ("[search]\nprecision = ['bf16']\n[fixed]\nprecision = 'fp32'\n", "both searched and fixed"),
        ("[search]\n", "names no knob"),
        ("[serch]\nprecision = ['bf16']\n", "unknown table"),
        ("[search]\nprecision = ['bf16']\n[fixed]\nnum_workers = -1\n", "out of range"),
    ],
)
def test_malformed_space_files_name_file_and_knob(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(SpaceError) as info:
        space.load(path)
    assert message in str(info.value) and path in str(info.value)


def test_toml_syntax_error_names_the_line(tmp_path):
    path = write(tmp_path, "[search]\nprecision = ['bf16']\ncompile = off\n")
    with pytest.raises(SpaceError, match="line 3"):
        space.load(path)


def test_missing_space():
    with pytest.raises(SpaceError, match="no such space; built-in spaces: cnn, cpu, default"):
        space.load("nonexistent")
    with pytest.raises(SpaceError, match="no such file"):
        space.load("missing/dir/space.toml")


def test_non_utf8_space_file_is_one_line(tmp_path):
    path = tmp_path / "latin1.toml"
    path.write_bytes("# espace de recherche: d\u00e9faut\n[search]\nprecision = ['bf16']\n".encode("latin-1"))
    with pytest.raises(SpaceError) as info:
        space.load(str(path))
    message = str(info.value)
    assert str(path) in message and "not UTF-8" in message and "0xe9 on line 1" in message
    assert "\n" not in message


def test_space_file_that_is_a_folder_or_unreadable_is_one_line(tmp_path, monkeypatch):
    folder = tmp_path / "folder.toml"
    folder.mkdir()
    with pytest.raises(SpaceError, match="is a folder, not a TOML file"):
        space.load(str(folder))
    with pytest.raises(SpaceError, match="not a regular file"):
        space.load("/dev/null")
    path = Path(write(tmp_path, "[search]\nprecision = ['bf16']\n"))

    def refuse(self: Path) -> bytes:  # root reads a chmod 000 file anyway: refuse as the kernel would for a user
        raise PermissionError(errno.EACCES, "Permission denied", str(self))

    monkeypatch.setattr(Path, "read_bytes", refuse)
    with pytest.raises(SpaceError) as info:
        space.load(str(path))
    assert str(info.value) == f"{path}: cannot read: Permission denied"


def test_builtin_spaces_ship_inside_the_package(tmp_path, monkeypatch):
    """The wheel installs only the package: the built-in spaces must live in it (the top-level folder links there)."""
    assert SPACES_DIR_IN_PACKAGE == space.SPACES_DIR
    assert (Path(__file__).resolve().parent.parent / "search_spaces").resolve() == space.SPACES_DIR  # the repo's link
    assert sorted(p.stem for p in space.SPACES_DIR.glob("*.toml")) == ["cnn", "cpu", "default", "inference",
                                                                       "launch", "transformer"]
    monkeypatch.chdir(tmp_path)  # an empty working folder: the built-in space
    assert space.find("cpu") == space.SPACES_DIR / "cpu.toml"
    (tmp_path / "search_spaces").mkdir()  # the working folder's own search_spaces/NAME.toml comes first
    (tmp_path / "search_spaces" / "cpu.toml").write_text("[search]\nprecision = ['fp32', 'bf16']\n")
    assert space.find("cpu") == tmp_path / "search_spaces" / "cpu.toml"
    assert space.load("cpu").search["precision"].choices == ("fp32", "bf16")


def test_effective_drops_what_does_not_apply_and_keeps_defaults():
    s = space.load("default")
    base = knobs.defaults(CPU4)
    eff = space.effective(s, CPU4, base)
    assert "pin_memory" not in eff.search and "cudnn_benchmark" not in eff.search
    assert eff.search["precision"].choices == ("fp32", "bf16")  # tf32/fp16 are CUDA-only
    assert eff.search["num_workers"].choices == (0, 2)  # 4 and 8 exceed this context's 2 CPUs
    assert eff.search["batch_size"].contains(32)  # the baseline's batch size is a candidate
    flat = space.effective(s, knobs.Context(device_type="cpu", input_rank=2, cpu_count=2), base)
    assert "memory_format" not in flat.search


def test_hash_ignores_location_but_not_content(tmp_path):
    a = space.load("cpu")
    b = space.load(write(tmp_path, (space.SPACES_DIR / "cpu.toml").read_text()))
    assert a.hash() == b.hash()
    c = space.load(write(tmp_path, "[search]\nprecision = ['fp32', 'bf16']\n"))
    assert c.hash() != a.hash()
    assert space.Space.from_dict(a.to_dict()).hash() == a.hash()


def test_range_dimension():
    s = space.parse({"search": {"batch_size": {"low": 8, "high": 60, "step": 16}}}, "x.toml", "x")
    dim = s.search["batch_size"]
    assert dim.values() == [8, 24, 40, 56]
    assert dim.with_value(32).contains(32)


# ---------------------------------------------------------------- fitting a space to the machine,
# and saying what it left out

NO_BF16 = knobs.Context(device_type="cpu", task="train", input_rank=4, cpu_count=2, cpu_bf16=False)
BF16 = knobs.Context(device_type="cpu", task="train", input_rank=4, cpu_count=2, cpu_bf16=True)
GPU_HOST_NO_BF16 = knobs.Context(device_type="cuda", task="train", input_rank=4, cpu_count=2, cpu_bf16=False)


def test_a_cpu_without_native_bf16_leaves_bf16_out_of_the_cpu_space_and_says_why():
    fitted = space.fit(space.load("cpu"), NO_BF16, knobs.defaults(NO_BF16))
    assert "precision" not in fitted.space.search  # fp32 alone is no search
    bf16 = [item for item in fitted.left_out if item.knob == "precision"]
    assert [(item.what, item.reason) for item in bf16] == [
        ("precision=bf16", "this CPU has no native bf16 (AVX512-BF16/AMX)")]
    assert fitted.space.search["threads"].values() == [1, 2]
    assert fitted.text() == ("precision=bf16: this CPU has no native bf16 (AVX512-BF16/AMX); "
                             "threads above 2: 2 CPUs here")
    assert space.effective(space.load("cpu"), NO_BF16, knobs.defaults(NO_BF16)) == fitted.space


def test_a_cpu_with_native_bf16_and_a_gpu_keep_bf16():
    fitted = space.fit(space.load("cpu"), BF16, knobs.defaults(BF16))
    assert fitted.space.search["precision"].choices == ("fp32", "bf16")
    assert [item.what for item in fitted.left_out] == ["threads above 2"]
    on_gpu = space.fit(space.load("default"), GPU_HOST_NO_BF16, knobs.defaults(GPU_HOST_NO_BF16))
    assert on_gpu.space.search["precision"].choices == ("fp32", "tf32", "bf16", "fp16")  # the host CPU is no matter
    assert not [item for item in on_gpu.left_out if item.knob == "precision"]
    assert "pin_memory" in on_gpu.space.search


def test_cuda_only_knobs_and_values_are_left_out_on_a_cpu_with_the_reason():
    fitted = space.fit(space.load("default"), BF16, knobs.defaults(BF16))
    cuda = {item.what for item in fitted.left_out if "CUDA" in item.reason}
    assert cuda == {"precision=tf32/fp16", "compile=reduce-overhead", "pin_memory", "cudnn_benchmark"}
    assert not cuda & set(fitted.space.search)
    assert "num_workers above 2: 2 CPUs here" in (fitted.text() or "")  # default.toml searches 0, 2, 4, 8 workers


def test_a_range_above_the_cpus_is_clipped_with_the_reason_and_nothing_left_out_says_nothing():
    s = space.parse({"search": {"threads": {"low": 1, "high": 16}, "num_workers": [0, 1]}}, "x.toml", "x")
    fitted = space.fit(s, NO_BF16, knobs.defaults(NO_BF16))
    assert fitted.space.search["threads"].values() == [1, 2]
    assert fitted.text() == "threads above 2: 2 CPUs here"
    fits = space.parse({"search": {"threads": [1, 2], "memory_format": ["contiguous", "channels_last"]}}, "y.toml", "y")
    assert space.fit(fits, NO_BF16, knobs.defaults(NO_BF16)).left_out == ()
    assert space.fit(fits, NO_BF16, knobs.defaults(NO_BF16)).text() is None


def test_the_baselines_value_is_never_left_out():
    base = {**knobs.defaults(NO_BF16), "precision": "bf16"}  # a space's [fixed] or a user's own baseline
    s = space.parse({"search": {"precision": ["fp32", "bf16"]}}, "x.toml", "x")
    fitted = space.fit(s, NO_BF16, base)
    assert fitted.space.search["precision"].choices == ("fp32", "bf16") and fitted.left_out == ()


def test_the_opening_says_what_was_left_out_here(monkeypatch):
    from types import SimpleNamespace

    for name in knobs.owned_environment():  # what the shell exported is named in a line of its own
        monkeypatch.delenv(name, raising=False)

    from autotune.tuning import preparation

    fitted = space.fit(space.load("cpu"), NO_BF16, knobs.defaults(NO_BF16))

    def opening(left_out: str | None) -> list[str]:
        prepared = preparation.Prepared(
            config=SimpleNamespace(trials=2), name="cnn", store=SimpleNamespace(shown="studies/cnn.db"), live=None,
            created=True, recovered=[], tuner=None, device="cpu", space_name="cpu",
            configurations=fitted.space.size(), searched=list(fitted.space.search), measured=0, runner=None,
            left_out=left_out)  # type: ignore[arg-type]
        return prepared.opening()

    lines = opening(fitted.text())
    assert lines[0].startswith("new study 'cnn' in studies/cnn.db: 0 measured, target 2; space cpu (")
    assert lines[1] == ("left out here: precision=bf16: this CPU has no native bf16 (AVX512-BF16/AMX); "
                        "threads above 2: 2 CPUs here")
    assert len(lines) == 2
    assert not any("left out" in line for line in opening(None))
