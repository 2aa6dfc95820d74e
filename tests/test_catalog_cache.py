"""The parsed-catalog cache (start-up speed) must give exactly the catalog the TOML files say."""

from importlib import resources

from ampmigrate import catalog


def _parsed() -> dict[str, catalog.Rule]:
    folder = resources.files("ampmigrate.rules")
    rules = [f for f in folder.iterdir() if f.name.endswith(".toml")]
    loaded = [catalog._load(f.read_text(encoding="utf-8")) for f in rules]
    return {r.code: r for r in sorted(loaded, key=lambda r: r.code)}


def _cache() -> str | None:
    folder = resources.files("ampmigrate.rules")
    files = sorted((f for f in folder.iterdir() if f.name.endswith(".toml")), key=lambda f: f.name)
    return catalog._cache_path(folder, files)


def test_cached_catalog_equals_the_parsed_one():
    catalog.all_rules.cache_clear()
    first = catalog.all_rules()  # parses or loads the cache
    catalog.all_rules.cache_clear()
    second = catalog.all_rules()  # the cache, written by the first call if it was missing
    assert first == second == _parsed()
    assert list(second) == sorted(second)


def test_a_broken_cache_file_is_parsed_around_and_replaced():
    path = _cache()
    if path is None:
        return  # not a real folder: no cache to break
    catalog.all_rules.cache_clear()
    catalog.all_rules()
    with open(path, "wb") as handle:
        handle.write(b"not a pickle")
    catalog.all_rules.cache_clear()
    assert catalog.all_rules() == _parsed()
    with open(path, "rb") as handle:
        assert handle.read() != b"not a pickle"
    catalog.all_rules.cache_clear()
