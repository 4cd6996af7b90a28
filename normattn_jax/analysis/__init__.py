"""Analyses of the papers: explaining away, mode collapse, unselectable keys, context mixing."""
