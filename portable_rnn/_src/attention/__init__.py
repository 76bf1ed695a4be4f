"""Scaled dot-product attention: the op (`api`), its shared math, its cost terms, and one module
per route (`routes`, registered in `routes.ROUTES`)."""
