"""The layout's rules, read from the source (AST, imports inside functions included):

- no import cycle among `taps` modules, nor among the app's Streamlit pieces (`app_pages/`);
- the engine (flat `taps/`) imports neither the app's logic (`taps.studio`) nor evaluation
  (`taps.eval`) nor training (`taps.train`); only the entry points (`python -m taps`, `taps.bench`,
  `taps.profile`) reach into `taps.eval`;
- arrows point down: evaluation (`taps.eval`) imports nothing of the app's logic (`taps.studio`),
  whose figures the bench's and profile's commands draw;
- one link module: no query-parameter parsing or writing outside `taps/studio/link.py` (Streamlit's
  `st.query_params` is touched only by the address bar's glue, `app_pages/address.py`);
- one home for a page's latency profile: nothing in the app finds one but `taps/studio/page_profile.py`;
- nothing under `taps/` imports streamlit;
- no string literal equal to a registered policy name outside the registry (`taps/policies.py`):
  code asks the policy instead of comparing names;
- no function in `taps/` longer than 80 lines;
- the model-free Learn toy imports no torch.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from taps.policies import names

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "taps"
ENTRY_POINTS = {"taps.__main__", "taps.bench", "taps.profile"}
APART = ("taps.studio", "taps.eval", "taps.train")
MAX_FUNCTION_LINES = 80


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
TREES = {name: ast.parse(path.read_text(), filename=str(path)) for name, path in MODULES.items()}


def imported(name: str, tree: ast.AST) -> set[str]:
    """Every module `name` imports, anywhere in its body (absolute names; `from pkg import mod` is `pkg.mod`)."""
    package = name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                found.add(submodule if submodule in MODULES else source)
    return found


GRAPH = {name: {m for m in imported(name, tree) if m in MODULES and m != name} for name, tree in TREES.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_among_taps_modules():
    assert cycles(GRAPH) == []


def app_pages_graph() -> dict[str, set[str]]:
    """Which of the app's Streamlit pieces (`app_pages/*.py`, the pages included) each one imports."""
    folder = ROOT / "app_pages"
    pieces = {p.stem: p for p in sorted(folder.glob("*.py"))}
    graph = {}
    for name, path in pieces.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom) and node.module == "app_pages":
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("app_pages."):
                found.add(node.module.split(".")[1])
        graph[name] = {m for m in found if m in pieces and m != name}
    return graph


def test_no_import_cycle_among_the_apps_pieces():
    graph = app_pages_graph()
    assert graph["frame"] and graph["profile_box"]          # the graph sees their imports
    assert cycles(graph) == []


def test_the_engine_imports_neither_studio_nor_eval_nor_train():
    engine = [m for m in MODULES if not m.startswith(APART) and m not in ENTRY_POINTS]
    assert "taps.session" in engine and "taps.selectors" in engine
    wrong = {m: sorted(d for d in GRAPH[m] if d.startswith(APART)) for m in engine}
    assert {m: d for m, d in wrong.items() if d} == {}


def test_evaluation_imports_nothing_of_the_app():
    evaluation = [m for m in MODULES if m.startswith("taps.eval")]
    assert "taps.eval.bench" in evaluation and "taps.eval.profile" in evaluation
    wrong = {m: sorted(d for d in GRAPH[m] if d.startswith("taps.studio")) for m in evaluation}
    assert {m: d for m, d in wrong.items() if d} == {}


def test_nothing_under_taps_imports_streamlit():
    users = [m for m, tree in TREES.items() if any(i.split(".")[0] == "streamlit" for i in imported(m, tree))]
    assert users == []


def literal_policy_names(source: str, where: str) -> list[str]:
    policy_names = set(names())
    return [f"{where}:{node.lineno} {node.value!r}" for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in policy_names]


def test_no_policy_name_literal_outside_the_registry():
    sources = [p for p in [*PACKAGE.rglob("*.py"), ROOT / "app.py", *(ROOT / "app_pages").glob("*.py")]
               if p != PACKAGE / "policies.py"]
    found = [hit for p in sources for hit in literal_policy_names(p.read_text(), str(p.relative_to(ROOT)))]
    assert found == []


def test_the_check_finds_a_literal_policy_name():
    """The rule above can fail: a comparison by name is found, a sentence naming it is not."""
    code = '"""Compare with ddtree."""\ndef f(cfg):\n    return cfg.selector == "ddtree"\n'
    assert literal_policy_names(code, "bad.py") == ["bad.py:3 'ddtree'"]


def test_no_function_in_taps_is_longer_than_80_lines():
    long = [f"{MODULES[m].relative_to(ROOT)}::{node.name} {node.end_lineno - node.lineno + 1} lines"
            for m, tree in TREES.items() for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert long == []


def test_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_learn_toy_imports_no_torch():
    code = ("import sys; import taps.studio.toy, taps.policies, taps.subtree, taps.cost_model; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch')[:3])")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_the_project_table_pins_what_requirements_txt_pins():
    """`pip install -r requirements.txt` (the README's set-up) and `pip install -e .[app,test]` install the same."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = [*project["dependencies"], *(d for extra in project["optional-dependencies"].values() for d in extra)]
    pinned = [line.split("#")[0].strip() for line in (ROOT / "requirements.txt").read_text().splitlines()]
    assert sorted(declared) == sorted(p for p in pinned if p)
    assert project["scripts"]["taps"] == "taps.__main__:main"


# ---------------------------------------------------------------------------- links and profiles
LINK_MODULE = PACKAGE / "studio" / "link.py"
ADDRESS_BAR = ROOT / "app_pages" / "address.py"
APP_SOURCES = [ROOT / "app.py", *sorted((ROOT / "app_pages").glob("*.py")), *sorted((PACKAGE / "studio").rglob("*.py"))]
QUERY_NAMES = {"params", "query", "query_params", "given"}      # what code calls a link's parameters
URL_PARSING = {"parse_qs", "parse_qsl", "urlencode", "urlparse", "urlsplit", "quote", "unquote"}


def query_parsing(source: str, where: str, address_bar: bool = False) -> list[str]:
    """Where `source` reads or writes query parameters itself: Streamlit's `st.query_params` (except
    in the address bar's glue, which only hands them over), `urllib.parse`, or a link's parameters
    read by name (`params["budget"]`, `params.get("budget")`, `"budget" in params`)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr == "query_params" and not address_bar:
            found.append(f"{where}:{node.lineno} st.query_params")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("urllib"):
            found += [f"{where}:{node.lineno} {a.name}" for a in node.names if a.name in URL_PARSING]
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in QUERY_NAMES:
            found.append(f"{where}:{node.lineno} {node.value.id}[...]")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("get", "get_all") and isinstance(node.func.value, ast.Name)
              and node.func.value.id in QUERY_NAMES):
            found.append(f"{where}:{node.lineno} {node.func.value.id}.{node.func.attr}(...)")
        elif isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops) and any(
                isinstance(c, ast.Name) and c.id in QUERY_NAMES for c in node.comparators):
            found.append(f"{where}:{node.lineno} ... in {node.comparators[0].id}")
    return found


def test_no_query_parameter_parsing_outside_the_link_module():
    """Step through, Race and sweep, Learn, the challenge cards and the frame (presenter=1) read and
    write their links through `taps.studio.link` only: one parser core, one writer."""
    sources = [p for p in APP_SOURCES if p != LINK_MODULE]
    found = [hit for p in sources
             for hit in query_parsing(p.read_text(), str(p.relative_to(ROOT)), address_bar=p == ADDRESS_BAR)]
    assert found == []
    assert "query_params" in ADDRESS_BAR.read_text()


def test_the_check_finds_query_parameter_parsing():
    code = ('import streamlit as st\nfrom urllib.parse import parse_qs\n'
            'def f(params):\n    if "budget" in params:\n        return int(params["budget"]), params.get("x")\n'
            'presenter = st.query_params.get("presenter") == "1"\n')
    assert sorted(query_parsing(code, "bad.py")) == ["bad.py:2 parse_qs", "bad.py:4 ... in params",
                                                     "bad.py:5 params.get(...)", "bad.py:5 params[...]",
                                                     "bad.py:6 st.query_params"]
    assert query_parsing("def f(card):\n    return dict(card.params)\n", "good.py") == []


PROFILE_FINDERS = {"resolve_profile", "default_profile", "shipped_reference", "shipped_references", "saved_profile",
                   "required_profile"}
PROFILE_HOME = {PACKAGE / "studio" / "page_profile.py", PACKAGE / "studio" / "speed.py"}


def test_a_pages_profile_is_found_in_one_place():
    """The pages, the sidebar, the lecture file and the challenge cards ask `page_profile` which
    profile sizes a page's trees and which prices its modelled figures; nothing else looks one up."""
    calls = []
    for path in [*APP_SOURCES, *sorted((ROOT / "scripts").glob("*.py"))]:
        if path in PROFILE_HOME:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            name = getattr(node.func, "attr", getattr(node.func, "id", "")) if isinstance(node, ast.Call) else ""
            if name in PROFILE_FINDERS:
                calls.append(f"{path.relative_to(ROOT)}:{node.lineno} {name}")
    assert calls == []
