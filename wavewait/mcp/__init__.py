"""The MCP face of wavewait: the seed tools as thin adapters over `wavewait.core`.

`wavewait mcp` (see `wavewait.mcp_server`) builds the server here; the tools are the
sanctioned thing an orchestrating agent calls instead of sleeping or polling.
"""
