"""CustomResourceDefinitions (`apiextensions.k8s.io/v1`), pure, as upstream's
apiextensions-apiserver has them:

- `definition`: the validation of a CRD itself (names, group, scope, versions with exactly
  one storage version, conversion, subresources, printer columns, selectable fields) with
  upstream's messages, and the structural schema checks of each version's schema;
- `schema`: what a version's schema does to a custom resource: validation with
  kube-openapi's messages, defaulting, and the OpenAPI definition it is served and pruned as;
- `naming`: the names and conditions (`NamesAccepted`, `Established`) of a CRD, and the
  version order that picks a group's preferred version;
- `cel`: the `x-kubernetes-validations` rules, compiled and evaluated with cel-python, with
  `cellib`, the part of Kubernetes' CEL libraries ephemera has.

The serving (routing, storage, discovery, conditions) is `ephemera.apiserver.customresources`.
"""
