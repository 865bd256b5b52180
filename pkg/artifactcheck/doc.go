// Package artifactcheck holds the tests that keep artifacts/rbac true to
// what the code needs and the docs promise: the objects that kustomization
// installs decode strictly into their kube types, rekey:jwt-signer grants
// signing and trust only on the documented CA name, and the API Priority
// and Fairness objects put the service-account token signer in a priority
// level of its own. It has no code of its own.
package artifactcheck
