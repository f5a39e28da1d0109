"""Where studies live: the storage factory, retries on lost connections, write tokens, and the artifact store."""

from hpo.storage._storage import StorageError, create_storage, mask_url, resolve_storage_url
from hpo.storage._trial_attrs import set_user_attrs

__all__ = ["StorageError", "create_storage", "mask_url", "resolve_storage_url", "set_user_attrs"]
