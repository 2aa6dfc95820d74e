"""The wheel ships the rule catalog, and docs/rules is what the catalog generates."""

from __future__ import annotations

import subprocess
import sys
import zipfile

from ampmigrate.catalog import all_rules
from ampmigrate.ruledocs import pages

from conftest import ROOT


def test_wheel_ships_the_rule_catalog(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(tmp_path)],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    [wheel] = tmp_path.glob("ampmigrate-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        archive.extractall(tmp_path / "unpacked")
    expected = {f"ampmigrate/rules/{p.name}" for p in (ROOT / "rules").glob("*.toml")}
    assert expected and expected <= names
    # every module of the package, subpackages included (a subpackage left out of pyproject's
    # list made every apex-API file an internal error for an installed copy)
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "ampmigrate").rglob("*.py")}
    assert modules - names == set()
    assert any(n.endswith("entry_points.txt") for n in names)
    # Load the catalog from the unpacked wheel alone (-S: no site-packages, no editable finder).
    probe = (
        "import sys; sys.path.insert(0, sys.argv[1]); import ampmigrate.catalog as c; "
        "print(c.__file__); print(len(c.all_rules()))"
    )
    out = subprocess.run(
        [sys.executable, "-S", "-c", probe, str(tmp_path / "unpacked")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out[0].startswith(str(tmp_path / "unpacked"))
    assert int(out[1]) == len(all_rules())


def test_every_rule_has_an_up_to_date_docs_page():
    docs = ROOT / "docs" / "rules"
    for name, content in pages().items():
        page = docs / name
        assert page.exists(), f"missing {page}; run: python -m ampmigrate.ruledocs docs/rules"
        assert page.read_text(encoding="utf-8") == content, (
            f"{page} is stale; run: python -m ampmigrate.ruledocs docs/rules"
        )
    stray = {p.name for p in docs.glob("*.md")} - set(pages())
    assert not stray, f"pages for rules that do not exist: {stray}"
