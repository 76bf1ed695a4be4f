"""Tools over the public API: the self-test, the rule tables and the environment report."""
