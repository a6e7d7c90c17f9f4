"""The `reasoner` command and its stages. Each stage reads files and writes files in a directory."""
