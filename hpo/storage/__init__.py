"""Where studies live: the storage factory, retries on lost connections, write tokens, and the artifact store."""

from hpo.storage._storage import StorageError, create_storage, mask_url, resolve_storage_url

__all__ = ["StorageError", "create_storage", "mask_url", "resolve_storage_url"]
