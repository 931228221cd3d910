"""Text -> AST: the parser, includes, overrides, the schema and the formatter."""
