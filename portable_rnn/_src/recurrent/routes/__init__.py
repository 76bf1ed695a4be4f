"""The recurrent routes, one module (or package) each, named after the route. `ROUTES` is the
registry, in order of preference: every family registers all of them, and a route rejects, with
its reasons, the calls and the families it cannot serve. A new route is its module and one
entry here."""

from . import cudnn, cudnn_ffi, pallas, scan

ROUTES = (cudnn.ROUTE, cudnn_ffi.ROUTE, pallas.ROUTE, scan.ROUTE)
