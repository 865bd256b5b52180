// Package monitoringcheck holds the test that keeps artifacts/monitoring
// true: every alert and dashboard expression parses as PromQL (with the
// Prometheus parser), and every metric it names is one that rekey-apiserver,
// rekey-agent or (for the revocation webhook) kube-apiserver registers,
// found by registering the real metrics in-process. Each alert's runbook
// must name a section of the docs that exists. It has no code of its own.
package monitoringcheck
