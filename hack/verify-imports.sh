#!/usr/bin/env bash
# Fails when an import runs up the layers: a package of a lower layer that
# imports, directly or through other packages, one of a higher layer. Layers
# point down (cmd -> pkg/cmd -> pkg/apiserver -> registry / controllers /
# agent -> issuer -> authority -> leaf utilities); a helper two layers share
# goes below both. Only non-test imports count: a test may reach up.
#
# Each offence is printed as the chain of imports that makes it, e.g.
#   pkg/agent -> pkg/controller/csrutil
set -o errexit -o nounset -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
MOD=$(go list -m)

# Packages (and everything below them) that must stay below the server
# assembly, the controllers and the admission plugins.
LOWER='pkg/(issuer|servingcert|agent|registry|authority|runner)'
HIGHER='pkg/(controller|admission|apiserver)'
# The authority is below the issuer.
AUTHORITY='pkg/authority'
ISSUER='pkg/issuer'

# One line per package of the module: the package, then its imports.
graph=$(go list -f '{{.ImportPath}}{{range .Imports}} {{.}}{{end}}' ./...)

out=$(awk -v mod="$MOD/" -v lower="$LOWER" -v higher="$HIGHER" -v authority="$AUTHORITY" -v issuer="$ISSUER" '
function under(p, re) { return p ~ ("^" re "(/|$)") }
function short(p) { return substr(p, length(mod) + 1) }
function forbidden(src, dst) {
	return under(dst, higher) || (under(src, authority) && under(dst, issuer))
}
{
	if (index($1, mod) != 1) next
	pkg = short($1)
	pkgs[++n] = pkg
	for (i = 2; i <= NF; i++) {
		if (index($i, mod) == 1) imports[pkg] = imports[pkg] " " short($i)
	}
}
END {
	for (k = 1; k <= n; k++) {
		src = pkgs[k]
		if (!under(src, lower)) continue
		# Breadth first, so that each offence is shown by its shortest chain.
		split("", seen); split("", parent)
		head = 1; tail = 1; queue[1] = src; seen[src] = 1
		while (head <= tail) {
			p = queue[head++]
			m = split(imports[p], deps, " ")
			for (j = 1; j <= m; j++) {
				d = deps[j]
				if (d in seen) continue
				seen[d] = 1; parent[d] = p
				if (forbidden(src, d)) {
					chain = d
					for (q = p; q != src; q = parent[q]) chain = q " -> " chain
					print src " -> " chain
					continue
				}
				queue[++tail] = d
			}
		}
	}
}' <<<"$graph" | sort)

if [[ -n "$out" ]]; then
	echo "imports run up the layers ($LOWER must not import $HIGHER; $AUTHORITY must not import $ISSUER):" >&2
	echo "$out" >&2
	exit 1
fi
