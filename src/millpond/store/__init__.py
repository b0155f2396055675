"""The state store: immutable SSTs on object storage, one manifest version per committed epoch."""
