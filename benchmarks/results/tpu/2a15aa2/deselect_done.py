import pathlib

DONE = set(pathlib.Path(__file__).with_name("done.txt").read_text().splitlines())


def pytest_collection_modifyitems(config, items):
    keep = [i for i in items if i.nodeid not in DONE]
    config.hook.pytest_deselected(items=[i for i in items if i.nodeid in DONE])
    items[:] = keep
