"""Scaled dot-product attention: the op (`api`), its shared math, and one module per route
(`cudnn`, `chunked`, `xla`)."""
