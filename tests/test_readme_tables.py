"""The README's tables stay true: every environment variable the package reads is documented,
the architecture table lists every module and only modules that exist, image paths exist."""

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "tensorplay_graph")
README = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()

# os.environ.get("X"), os.environ["X"], os.getenv("X"), "X" in os.environ
ENV_READ = re.compile(r"""(?:environ(?:\.get)?[\[(]|getenv\()\s*["']([A-Z][A-Z0-9_]*)["']"""
                      r"""|["']([A-Z][A-Z0-9_]*)["']\s+in\s+(?:os\.)?environ""")


def package_sources():
    for folder, _dirs, files in os.walk(PACKAGE):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                yield path, open(path, encoding="utf-8").read()


def table_after(heading_pattern):
    """Rows (lists of cells) of the first markdown table after a line matching the pattern."""
    lines = README.splitlines()
    start = next(i for i, line in enumerate(lines) if re.search(heading_pattern, line))
    rows = []
    for line in lines[start:]:
        if line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
        elif rows:
            break
    return rows[2:]  # header and separator


def env_table_names():
    rows = table_after(r"^\| environment variable \|")
    return {name for row in rows for name in re.findall(r"`([A-Z][A-Z0-9_]*)`", row[0])}


def test_every_environment_variable_read_is_in_the_readme_table():
    read = {}
    for path, text in package_sources():
        for match in ENV_READ.finditer(text):
            read.setdefault(match.group(1) or match.group(2), os.path.relpath(path, ROOT))
    assert {"TPG_LOGS", "TPG_CACHE_DIR", "TPG_DEBUG_DIR", "TPG_LINT"} <= set(read)  # the scan works
    documented = env_table_names()
    missing = {name: where for name, where in read.items() if name not in documented}
    assert not missing, f"document these in the README's environment table: {missing}"
    stale = {name for name in documented if name.startswith("TPG_") and name not in read}
    assert not stale, f"the README documents variables nothing reads: {stale}"


def architecture_entries():
    """(listed paths relative to the package, file names mentioned in the 'holds' column)."""
    listed, mentioned = [], []
    for row in table_after(r"^\| package / module \| holds \|"):
        for entry in re.findall(r"`([^`]+)`", row[0]):
            listed.append(entry.removeprefix("tensorplay_graph/"))
        folder = listed[-1] if not listed[-1].endswith(".py") else ""
        mentioned += [(folder, name) for name in re.findall(r"`([\w/]+\.py)`", row[1])]
    return listed, mentioned


def test_architecture_table_lists_every_module_and_only_real_ones():
    listed, mentioned = architecture_entries()
    for entry in listed:
        assert os.path.exists(os.path.join(PACKAGE, entry)), f"README lists {entry!r}: no such module"
    for folder, name in mentioned:
        hits = [path for path, _ in package_sources() if path.endswith(os.sep + name)]
        assert hits, f"README's architecture table mentions {name!r} ({folder}): no such file"
    actual = {name for name in os.listdir(PACKAGE)
              if name.endswith(".py") and name != "__init__.py"
              or os.path.isfile(os.path.join(PACKAGE, name, "__init__.py"))}
    unlisted = actual - set(listed)
    assert not unlisted, f"add these to the README's architecture table: {sorted(unlisted)}"


def test_readme_images_exist():
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", README)
    assert images, "the README embeds a drawing"
    for image in images:
        assert os.path.isfile(os.path.join(ROOT, image)), f"README image {image} is missing"
