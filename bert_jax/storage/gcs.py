"""`gs://` for the file layer (bert_jax/storage/files.py): credentials found once, and a bucket that
cannot be reached named in one line within seconds.

Left to itself, gcsfs looks for credentials by every method it knows, asking the GCE
metadata server five times with back-off (16 s where there is none), then retries each
request six times with exponential back-off: without network the first `gs://` path took
51 s and ended in a 186-line traceback (aiohttp's ClientConnectorDNSError), and without
credentials only a gcsfs warning said why. Here the credentials come from
`google.auth.default()` (the environment, gcloud's application-default login, or the
metadata server of a Google Cloud VM) or are anonymous, and before the first use of each
bucket one request with a short timeout and no retries asks the bucket for one object
name; a failure is a `UserError` naming the bucket and how to authenticate.
"""

import functools
import os

from bert_jax.errors import UserError

PROBE_SECONDS = 10.0  # the reachability request's timeout (a missing host fails at once)
AUTHENTICATE = ("authenticate with `gcloud auth application-default login`, or set "
                "GOOGLE_APPLICATION_CREDENTIALS to a service-account key file")
_SCOPE = "https://www.googleapis.com/auth/devstorage.full_control"  # gcsfs's default access
_reachable = set()  # (endpoint, bucket) pairs that answered in this process


def bucket_of(path: str) -> str:
    """`gs://bucket/a/b` -> `bucket`."""
    return path.split("://", 1)[1].split("/", 1)[0]


def filesystem(path: str):
    """The gcsfs file system for `path`, after checking (once) that its bucket answers."""
    import fsspec

    options = {"use_listings_cache": False}  # orbax and tensorstore write through other clients
    if not _configured_elsewhere():
        token, project = default_credentials()
        options.update(token=token, **({"project": project} if project else {}))
    storage = fsspec.filesystem(path.split("://", 1)[0], **options)
    bucket = bucket_of(path)
    if bucket and (storage.base, bucket) not in _reachable:
        check_bucket(storage, bucket, anonymous=storage.credentials.credentials is None)
        _reachable.add((storage.base, bucket))
    return storage


def _configured_elsewhere() -> bool:
    """An emulator or an fsspec token setting (FSSPEC_GCS_TOKEN): gcsfs reads them itself."""
    import fsspec.config

    return bool(os.environ.get("STORAGE_EMULATOR_HOST")
                or fsspec.config.conf.get("gcs", {}).get("token")
                or fsspec.config.conf.get("gs", {}).get("token"))


@functools.cache
def default_credentials():
    """(google.auth credentials, project) or ("anon", None) when there are none."""
    import google.auth
    import google.auth.exceptions

    try:
        credentials, project = google.auth.default(scopes=[_SCOPE])
    except google.auth.exceptions.DefaultCredentialsError:
        return "anon", None
    return credentials, project


def check_bucket(storage, bucket: str, anonymous: bool) -> None:
    """One request for one object name in `bucket`; `UserError` if it cannot be made or is
    refused without credentials. A refusal with credentials is left to the operation (a
    role may read objects without listing them)."""
    import requests

    without = f"; no Google Cloud credentials were found: {AUTHENTICATE}" if anonymous else ""
    url = f"{storage.base}b/{requests.utils.quote(bucket, safe='')}/o"
    headers = {}
    try:
        storage.credentials.apply(headers)  # refreshes an expired token (a network call)
    except Exception as error:  # google.auth's and gcsfs's refresh errors share no base
        raise UserError(f"gs://{bucket}: the Google Cloud credentials could not be refreshed "
                        f"({_first_line(error)}); {AUTHENTICATE}") from None
    try:
        answer = requests.get(url, params={"maxResults": "1", "fields": "kind"},
                              headers=headers, timeout=PROBE_SECONDS)
    except requests.exceptions.RequestException as error:
        raise UserError(f"gs://{bucket}: cannot reach Google Cloud Storage at "
                        f"{storage.base.split('/storage/')[0]} ({_network_reason(error)}); "
                        f"check the network connection{without}") from None
    if answer.status_code in (401, 403) and anonymous:
        raise UserError(f"gs://{bucket}: access denied (HTTP {answer.status_code}) without "
                        f"credentials; {AUTHENTICATE}")


def _network_reason(error) -> str:
    import requests

    if isinstance(error, requests.exceptions.Timeout):
        return f"no answer within {PROBE_SECONDS:g} s"
    text = str(error)
    for marker, reason in (("NameResolution", "its host name does not resolve"),
                           ("Connection refused", "connection refused"),
                           ("Network is unreachable", "network unreachable")):
        if marker in text:
            return reason
    return _first_line(error)


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
