"""A GPU of one's own as a file (`--hardware my-gpu.toml`, docs/hardware.md): a preset written out by `specsim
hardware show` prices exactly as the preset; a file written from the docs alone works and says its fractions are
assumed; a bad file is refused in one line naming the field and the file."""

import json

import pytest
from conftest import one_line_error, run

from scenarios import _table, hardware_names, hardware_table
from scenarios.hardware_file import check_hardware_table

PREDICT = ("predict", "--acceptance", "iid:0.7", "--batch", "1,16", "--k", "0..3", "--context", "512", "--json")
# What docs/hardware.md's smallest example holds: the four required fields and a source
MINIMAL = ('name = "My GPU"\nmem_bw_GB_per_s = 936\npeak_TFLOP_per_s = { bf16 = 142, fp16 = 142 }\n'
           'mem_GB = 24\nsource = "a datasheet"\n')


def rows(result):
    assert result.exit_code == 0, result.output
    return json.loads(result.output[result.output.index("{"):result.output.rindex("}") + 1])["rows"]


@pytest.mark.parametrize("preset", ["h100-sxm", "rtx-4090"])
def test_a_preset_written_out_prices_as_the_preset(tmp_path, preset):
    shown = run("hardware", "show", preset)
    assert shown.exit_code == 0, shown.output
    path = tmp_path / "my-gpu.toml"
    path.write_text(shown.output)
    assert rows(run(*PREDICT, "--hardware", str(path))) == rows(run(*PREDICT, "--hardware", preset))


def test_a_file_from_the_docs_alone_works_and_says_its_fractions_are_assumed(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text(MINIMAL)
    result = run(*PREDICT, "--hardware", str(path))
    assert result.exit_code == 0, result.output
    assert "achieved fractions of its datasheet are assumed" in result.output
    assert '"rates": "assumed' in result.output


def test_a_file_with_its_own_fractions_is_not_called_assumed(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text(MINIMAL + "bw_efficiency = 0.9\nflops_efficiency = 0.6\n")
    result = run(*PREDICT, "--hardware", str(path))
    assert result.exit_code == 0, result.output
    assert "are assumed" not in result.output and "set in hardware file" in result.output


@pytest.mark.parametrize("change, fragment", [
    ("mem_bw_GB_per_s = 0", "mem_bw_GB_per_s = 0"),
    ("mem_bw_GB_per_s = -936", "mem_bw_GB_per_s = -936"),
    ("mem_bw_GB_per_s = nan", "mem_bw_GB_per_s = nan"),
    ("mem_bw_GB_per_s = 1e9", "mem_bw_GB_per_s = 1000000000.0 is out of range"),  # 1e6 TB/s
    ("mem_GB = 0", "mem_GB = 0"),
    ("peak_TFLOP_per_s = { bf16 = inf }", "peak_TFLOP_per_s.bf16 = inf"),
    ("peak_TFLOP_per_s = { bf61 = 142 }", "peak_TFLOP_per_s.bf61 is not a compute dtype"),
    ("peak_TFLOP_per_s = {}", "peak_TFLOP_per_s must be a table"),
    ("bw_efficiency = 1.5", "bw_efficiency = 1.5 is out of range"),
    ("bw_effciency = 0.8", "bw_effciency is not a hardware field"),
    ("interconnect = \"PCIe\"", "interconnect is given without interconnect_GB_per_s"),
    ("name = 3", "name = 3 must be a str"),
])
def test_a_bad_file_is_refused_in_one_line_naming_the_field_and_the_file(tmp_path, change, fragment):
    key = change.split(" =")[0]
    text = "\n".join(line for line in MINIMAL.splitlines() if not line.startswith(key + " ")) + "\n" + change + "\n"
    path = tmp_path / "bad-gpu.toml"
    path.write_text(text)
    one_line_error(run(*PREDICT, "--hardware", str(path)), fragment, "bad-gpu.toml")


def test_a_missing_field_a_missing_file_and_not_toml_are_one_line(tmp_path):
    path = tmp_path / "gpu.toml"
    path.write_text(MINIMAL.replace("mem_GB = 24\n", ""))
    one_line_error(run(*PREDICT, "--hardware", str(path)), "mem_GB is missing", "gpu.toml", "hardware show")
    one_line_error(run(*PREDICT, "--hardware", str(tmp_path / "none.toml")), "no such hardware file", "none.toml")
    path.write_text("name = [")
    one_line_error(run(*PREDICT, "--hardware", str(path)), "not a TOML file", "gpu.toml")


def test_list_names_every_preset_and_show_refuses_an_unknown_one():
    listed = run("hardware", "list")
    assert listed.exit_code == 0
    assert all(name in listed.output for name in hardware_names())
    one_line_error(run("hardware", "show", "h100"), "unknown hardware 'h100'", "h100-sxm")


@pytest.mark.parametrize("name", hardware_names())
def test_every_preset_passes_the_checks_a_file_does(name):
    check_hardware_table({**_table("hardware")["defaults"], **hardware_table(name)}, name)


def test_a_sweep_reads_a_hardware_file_from_beside_its_spec(tmp_path):
    from scenarios.fleet import load_sweep_spec

    (tmp_path / "gpu.toml").write_text(MINIMAL)
    spec = tmp_path / "sweep.toml"
    spec.write_text('hardware = ["gpu.toml", "h100-sxm"]\npairs = [["llama-3.1-8b", "llama-3.2-1b"]]\n'
                    'acceptance = "iid:0.7"\npolicies = ["off"]\nrates = [1]\n')
    assert load_sweep_spec(spec).hardware == (str(tmp_path / "gpu.toml"), "h100-sxm")
