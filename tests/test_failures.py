"""A cross-cutting check of the package's source: no broad exception handler swallows an
exception silently (``except Exception: pass``); what goes wrong is raised or announced."""


def test_no_broad_exception_handler_in_the_package_swallows_silently():
    import ast
    import pathlib

    import torchrankboost

    root = pathlib.Path(torchrankboost.__file__).parent
    offenders = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ExceptHandler):
                continue
            broad = node.type is None or (isinstance(node.type, ast.Name)
                                          and node.type.id in ("Exception", "BaseException"))
            silent = all(isinstance(b, ast.Pass) for b in node.body)
            if broad and silent:
                offenders.append(f"{path.relative_to(root)}:{node.lineno}")
    assert offenders == []
