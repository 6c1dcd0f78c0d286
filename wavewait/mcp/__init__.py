"""The MCP face of wavewait: the wait tools as thin adapters over `wavewait.core`.

`wavewait mcp` (flags in `wavewait.cli`) builds one `Settings` and runs `server.serve`; each
tool is one typed function in `tools`. The tools are the sanctioned thing an orchestrating
agent calls instead of sleeping or polling.
"""
