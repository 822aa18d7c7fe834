"""Storage that cannot be reached, told apart from a store that is damaged.

Damage is mended only by a copy or a new shuffle; storage that did not serve a
request damaged nothing, and the advice is about credentials, retries or the
network. Other libraries' errors are recognised without importing them.
"""

from __future__ import annotations

import contextlib
import difflib
import errno
import inspect
import re
import sys
from collections.abc import Iterator, Sequence
from typing import Any, Final, Literal

from .._errors import Argument, DaskShuffleError, DaskShuffleValueError, StorageAccessError

__all__ = ["access_error", "raise_storage_failure", "reaching"]

#: Why storage did not serve a request.
Reason = Literal["credentials", "refused", "throttled", "unreachable", "server"]

#: The reasons, the most telling first (a refusal raised from an invalid key is about credentials).
_ORDER: Final[tuple[Reason, ...]] = ("credentials", "throttled", "server", "unreachable", "refused")
#: Error codes of S3 (and compatible servers), and the reason each stands for.
_CODES: Final[dict[str, Reason]] = {
    **dict.fromkeys(
        ["SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequests", "503", "429"],
        "throttled",
    ),
    **dict.fromkeys(["InternalError", "ServiceUnavailable", "500", "502", "504"], "server"),
    **dict.fromkeys(
        ["InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken", "TokenRefreshRequired"],
        "credentials",
    ),
}
_UNREACHABLE_ERRNOS: Final = frozenset(
    {
        errno.ETIMEDOUT,
        errno.ECONNREFUSED,
        errno.ECONNRESET,
        errno.ECONNABORTED,
        errno.EHOSTUNREACH,
        errno.ENETUNREACH,
        errno.ENETDOWN,
        errno.EPIPE,
    }
)
#: (module, class) of the errors other libraries raise for each reason; looked up only where the module is loaded.
_FOREIGN: Final[dict[Reason, tuple[tuple[str, str], ...]]] = {
    "credentials": (
        ("botocore.exceptions", "NoCredentialsError"),
        ("botocore.exceptions", "PartialCredentialsError"),
        ("botocore.exceptions", "CredentialRetrievalError"),
        ("botocore.exceptions", "NoAuthTokenError"),
        ("botocore.exceptions", "TokenRetrievalError"),
        ("botocore.exceptions", "SSOError"),
        ("google.auth.exceptions", "DefaultCredentialsError"),
        ("google.auth.exceptions", "RefreshError"),
        ("azure.core.exceptions", "ClientAuthenticationError"),
    ),
    "unreachable": (
        ("botocore.exceptions", "ConnectionError"),  # EndpointConnectionError, ConnectTimeoutError, ...
        ("botocore.exceptions", "HTTPClientError"),  # ReadTimeoutError, ...
        ("aiohttp", "ClientConnectionError"),
        ("aiohttp", "ServerTimeoutError"),
        ("azure.core.exceptions", "ServiceRequestError"),
    ),
}


def _chain(error: BaseException) -> Iterator[BaseException]:
    """``error`` and the errors it was raised from (``__cause__``, else ``__context__``), each once."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _foreign(error: BaseException, reason: Reason) -> bool:
    for module, name in _FOREIGN.get(reason, ()):
        kind = getattr(sys.modules.get(module), name, None)
        if isinstance(kind, type) and isinstance(error, kind):
            return True
    return False


def _reason_of(error: BaseException) -> Reason | None:
    """The reason ``error`` itself (not what it was raised from) stands for, if any."""
    if isinstance(error, StorageAccessError):
        return next((reason for reason in _ORDER if reason == error.reason), "refused")
    response = getattr(error, "response", None)  # a botocore ClientError's, with its code ("SlowDown", "403")
    code = response.get("Error", {}).get("Code") if isinstance(response, dict) else None
    if str(code) in _CODES:
        return _CODES[str(code)]
    if _foreign(error, "credentials"):
        return "credentials"
    if isinstance(error, PermissionError):
        return "refused"
    if isinstance(error, TimeoutError | ConnectionError) or _foreign(error, "unreachable"):
        return "unreachable"
    if isinstance(error, OSError) and error.errno is not None:
        if error.errno == errno.EBUSY:  # s3fs's SlowDown, ServiceUnavailable
            return "throttled"
        if error.errno in _UNREACHABLE_ERRNOS:
            return "unreachable"
        if error.errno == getattr(errno, "EREMOTEIO", -1):  # s3fs's InternalError
            return "server"
    return None


def failure_reason(error: BaseException) -> Reason | None:
    """Why storage did not serve the request that raised ``error``; ``None`` if it did (or if it is no storage error).

    The most telling reason along the chain of errors wins: a ``PermissionError``
    raised from a botocore error about an invalid access key is ``"credentials"``.

    Examples
    --------
    >>> failure_reason(TimeoutError("read timed out")), failure_reason(PermissionError("Forbidden"))
    ('unreachable', 'refused')
    >>> failure_reason(OSError(errno.EBUSY, "Please reduce your request rate.")), failure_reason(ValueError("bad"))
    ('throttled', None)
    """
    if isinstance(error, DaskShuffleError) and not isinstance(error, StorageAccessError):
        return None  # the library's own verdict (damage, a bad argument) stands
    if isinstance(error, FileNotFoundError):
        return None  # an answer (nothing there), even raised while another request's failure was handled
    found = [reason for reason in map(_reason_of, _chain(error)) if reason is not None]
    return next((reason for reason in _ORDER if reason in found), None)


#: The storage options the advice names, spelled as the caller passes them (``Argument``: Python's or an option's).
_OPTIONS = "storage_options"


def _advice(url: str, reason: Reason, workers: bool) -> list[str | Argument]:
    s3 = url.split("://", 1)[0] in ("s3", "s3a")
    where = "where the workers run (this process's environment does not reach them)" if workers else "of this process"
    if reason == "credentials":
        how: list[str | Argument] = (
            [
                "pass them (",
                Argument(_OPTIONS, {"key": "...", "secret": "..."}),
                ", or ",
                Argument(_OPTIONS, {"profile": "..."}),
                "; ",
                Argument(_OPTIONS, {"anon": True}),
                " for a public bucket) or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) in the "
                "environment",
            ]
            if s3
            else [
                "pass them with ",
                Argument(_OPTIONS),
                " (as the filesystem of this URL takes them) or set them in the environment",
            ]
        )
        travel: list[str | Argument] = (
            [": ", Argument(_OPTIONS), " travel with the tasks, the environment does not"] if workers else []
        )
        return [*how, f" {where}", *travel, "."]
    if reason == "refused":
        return [
            "check the credentials in ",
            Argument(_OPTIONS),
            " (for S3: key and secret, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or AWS_PROFILE)" if s3 else "",
            f" and in the environment {where}, and the permissions on this path.",
        ]
    retries: list[str | Argument] = (
        [
            " Allow more retries with ",
            Argument(_OPTIONS, {"config_kwargs": {"retries": {"max_attempts": 10, "mode": "adaptive"}}}),
            ".",
        ]
        if s3
        else []
    )
    if reason == "throttled":
        return [
            "nothing is damaged: try again later, or send fewer requests at once (fewer workers, a smaller prefetch=).",
            *retries,
        ]
    if reason == "server":
        return ["nothing is damaged: try again later.", *retries]
    endpoint: list[str | Argument] = (
        [" (for S3: ", Argument(_OPTIONS, {"client_kwargs": {"endpoint_url": "..."}}), ")"] if s3 else []
    )
    network = "the workers" if workers else "this machine"
    return [
        "nothing is damaged: check the endpoint",
        *endpoint,
        f" and the network from {network}, then try again.",
        *retries,
    ]


_GOT: Final[dict[Reason, str]] = {
    "credentials": "no usable credentials",
    "refused": "access denied",
    "throttled": "requests throttled (too many at once) after every retry",
    "unreachable": "no answer (a timeout or a connection refused or broken) after every retry",
    "server": "server errors after every retry",
}


def access_error(
    url: str,
    error: BaseException | str,
    reason: Reason,
    *,
    what: str | None = None,
    workers: Sequence[str] = (),
    n_workers: int = 0,
) -> StorageAccessError:
    """The :class:`StorageAccessError` for ``error``, met reaching ``url`` from this process, or from ``workers``.

    ``what`` names the file of ``url`` that was read, if it is not ``url``
    itself. ``workers`` are the addresses of the cluster's workers that met
    ``error`` (of ``n_workers``) where this process reaches ``url``.

    Examples
    --------
    >>> error = access_error("s3://bucket/piles.zarr", TimeoutError("read timed out"), "unreachable")
    >>> error.reason, error.url
    ('unreachable', 's3://bucket/piles.zarr')
    >>> error = access_error("s3://bucket/raw", "Unable to locate credentials", "credentials", workers=["tcp://w:1"])
    >>> "Got 1 worker (tcp://w:1) with no usable credentials (Unable to locate credentials)" in str(error)
    True
    """
    expected = "credentials that may read and write" if reason in ("credentials", "refused") else "an answer from"
    about = f" (reading {what!r})" if what else ""
    if workers:
        shown = ", ".join(workers[:3]) + (", ..." if len(workers) > 3 else "")
        count = f"{len(workers)} of the cluster's {n_workers} workers" if n_workers > len(workers) else None
        count = count or f"{len(workers)} worker{'s' if len(workers) != 1 else ''}"
        has = "has them" if reason in ("credentials", "refused") else "reaches it"
        text = (
            f"Expected {expected} {url!r} on every worker of the cluster. Got {count} ({shown}) with "
            f"{_GOT[reason]} ({error}), though this process {has}, instead; "
        )
    else:
        text = f"Expected {expected} {url!r}. Got {_GOT[reason]} ({error}){about} instead; "
    return StorageAccessError([text, *_advice(url, reason, bool(workers))], reason=reason, url=url)


_UNEXPECTED = re.compile(r"unexpected keyword argument '([^']+)'")


def option_error(
    url: str, options: dict[str, Any] | None, error: BaseException, fs_class: Any = None
) -> DaskShuffleValueError | None:
    """A :class:`DaskShuffleValueError` naming a storage option the filesystem of ``url`` does not take, or ``None``.

    A misspelt option (``secrett``) reaches the filesystem's constructor, or
    (s3fs) the session it makes at its first request, as an unexpected keyword.
    """
    if not isinstance(error, TypeError) or not options:
        return None
    match = _UNEXPECTED.search(str(error))
    if match is None or match.group(1) not in options:
        return None
    name = match.group(1)
    try:
        parameters = inspect.signature(fs_class.__init__).parameters.values() if fs_class is not None else []
    except (TypeError, ValueError):
        parameters = []
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    known = [parameter.name for parameter in parameters if parameter.kind in kinds and parameter.name != "self"]
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    takes = f"{getattr(fs_class, '__name__', 'its filesystem')} takes {', '.join(known[:12])}, ...; " if known else ""
    return DaskShuffleValueError(
        f"Expected storage_options that the filesystem of {url!r} takes. Got {name!r}, which it does not take "
        f"({error}), instead; {hint}{takes}check the spelling in storage_options.",
        parameter="storage_options",
    )


def raise_storage_failure(
    error: BaseException,
    url: str,
    options: dict[str, Any] | None = None,
    fs_class: Any = None,
    *,
    what: str | None = None,
) -> None:
    """Raise the error for ``error``, raised reaching ``url``, if storage did not serve it; else return.

    A :class:`StorageAccessError` (credentials, refused, throttled,
    unreachable, server), or a :class:`DaskShuffleValueError` for a storage
    option the filesystem does not take, raised from ``error``. The one check
    of a caller that holds an error it caught (a fetch's, a reader's): a
    return leaves ``error`` to the caller, as damage or as it is.

    Examples
    --------
    >>> raise_storage_failure(ValueError("a bad footer"), "s3://bucket/piles.parquet")  # damage: the caller's
    >>> raise_storage_failure(OSError(errno.EBUSY, "Please reduce your request rate."), "s3://bucket/piles.parquet")
    Traceback (most recent call last):
    ...
    daskshuffle._errors.StorageAccessError: Expected an answer from 's3://bucket/piles.parquet'. Got requests throttled ...
    """
    failure: DaskShuffleError | None
    reason = failure_reason(error)
    if reason is None:
        failure = option_error(url, options, error, fs_class)
    elif isinstance(error, StorageAccessError):
        raise error
    else:
        failure = access_error(url, error, reason, what=what)
    if failure is not None:
        raise failure from error


@contextlib.contextmanager
def reaching(
    url: str, options: dict[str, Any] | None = None, fs_class: Any = None, *, what: str | None = None
) -> Iterator[None]:
    """Raise a failure of the storage of ``url`` in the body as :func:`raise_storage_failure` names it; any other as it is.

    The one place a request's error is told apart, for every request: a
    :class:`~daskshuffle.storage.Location`'s (:meth:`Location.reaching
    <daskshuffle.storage.Location.reaching>`) and a bare filesystem's.

    Examples
    --------
    >>> with reaching("s3://bucket/piles.zarr"):
    ...     raise OSError(errno.EBUSY, "Please reduce your request rate.")
    Traceback (most recent call last):
    ...
    daskshuffle._errors.StorageAccessError: Expected an answer from 's3://bucket/piles.zarr'. Got requests throttled ...
    """
    try:
        yield
    except DaskShuffleError:
        raise
    except Exception as error:
        raise_storage_failure(error, url, options, fs_class, what=what)
        raise
