"""wavewait: fan work out to agents, then sit still until they report."""

__version__ = "0.1.0"
