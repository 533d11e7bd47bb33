"""Which parts an impersonation asks for (`ephemera.apiserver.impersonation`): upstream's
reading of the `Impersonate-*` headers and the user they make."""

from __future__ import annotations

from multidict import CIMultiDict, CIMultiDictProxy

from ephemera.apiserver.impersonation import Impersonation, impersonated_user, requests_of


def headers(*pairs: tuple[str, str]) -> CIMultiDictProxy[str]:
    return CIMultiDictProxy(CIMultiDict(pairs))


def test_a_service_account_name_is_that_account_only_when_valid() -> None:
    assert requests_of(headers(("Impersonate-User", "system:serviceaccount:ns:builder"))) == [
        Impersonation("ServiceAccount", "builder", "ns")]
    for name in ("system:serviceaccount:ns", "system:serviceaccount:ns:a:b",
                 "system:serviceaccount:Bad_NS:builder"):
        assert requests_of(headers(("Impersonate-User", name))) == [Impersonation("User", name)]


def test_parts_in_upstream_order_and_extra_keys_decoded() -> None:
    parts = requests_of(headers(("Impersonate-Uid", "u"), ("Impersonate-Group", "a"),
                                ("impersonate-extra-Acme.com%2FScopes", "x"),
                                ("Impersonate-Extra-acme.com%2Fscopes", "y"),
                                ("Impersonate-User", "jane"), ("Impersonate-Group", "b")))
    assert parts == [Impersonation("User", "jane"), Impersonation("Group", "a"),
                     Impersonation("Group", "b"),
                     Impersonation("UserExtra", "x", key="acme.com/scopes"),
                     Impersonation("UserExtra", "y", key="acme.com/scopes"),
                     Impersonation("UID", "u")]
    user = impersonated_user(parts)
    assert user.groups == ("a", "b", "system:authenticated")
    assert user.extra == {"acme.com/scopes": ("x", "y")} and user.uid == "u"
    attributes = parts[3].attributes(user)
    assert (attributes.verb, attributes.api_group, attributes.resource,
            attributes.subresource, attributes.name) == (
        "impersonate", "authentication.k8s.io", "userextras", "acme.com/scopes", "x")


def test_groups_asked_for_replace_the_accounts_and_keep_unauthenticated() -> None:
    account = Impersonation("ServiceAccount", "b", "ns")
    assert impersonated_user([account, Impersonation("Group", "g")]).groups == (
        "g", "system:authenticated")
    assert impersonated_user([Impersonation("User", "jane"),
                              Impersonation("Group", "system:unauthenticated")]).groups == (
        "system:unauthenticated",)
    assert requests_of(headers(("Accept", "*/*"))) == []
