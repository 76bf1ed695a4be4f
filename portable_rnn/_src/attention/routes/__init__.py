"""The attention routes, one module each, named after the route. `ROUTES` is the registry, in
order of preference: a new route is its module and one entry here."""

from . import chunked, cudnn, flash, splash, xla

ROUTES = (cudnn.ROUTE, splash.ROUTE, flash.ROUTE, chunked.ROUTE, xla.ROUTE)
