#!/usr/bin/env bash
# Fails when an include breaks the layer order of docs/architecture.md, when a
# header marked "Private to DIR/" is included from outside DIR/, or when code
# outside kernels/cpu_features.c asks the CPU for its features itself.
# One line per offence, "file:line: what (why)"; exit 1 if there is any.
# Usage: scripts/check-layers.sh [SOURCE_ROOT]   (default: the repository root)
set -euo pipefail
root="${1:-$(cd "$(dirname "$0")/.." && pwd)}"
cd "$root"
doc=docs/architecture.md

# The fenced block that starts with ```layers: "folder: folders it may include".
rules=$(awk '/^```layers[ \t]*$/ { on = 1; next } on && /^```/ { exit } on' "$doc")
if [ -z "$rules" ]; then
    echo "$doc: no \`\`\`layers block" >&2
    exit 2
fi
folders=$(printf '%s\n' "$rules" | awk -F: 'NF { gsub(/[ \t]/, "", $1); print $1 }')

# Private headers: the first line says "/* Private to DIR/ ...".
private=$(for d in $folders; do
    [ -d "$d" ] || continue
    find "$d" -name '*.h' -o -name '*.cuh'
done | while read -r h; do
    if head -n1 "$h" | grep -q '^/\* Private to '; then printf '%s\n' "$h"; fi
done)

# Exempt from the CPU-probe rule: the one module that does it.
probe_home=kernels/cpu_features.c

status=0
for d in $folders; do
    [ -d "$d" ] || continue
    find "$d" \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -print
done | sort | awk -v rules="$rules" -v private="$private" -v probe_home="$probe_home" '
function top(p) { sub(/\/.*/, "", p); return p }
function dir(p) { if (p !~ /\//) return "."; sub(/\/[^\/]*$/, "", p); return p }
# Resolves "a/../b" and "./" so that a relative include names its real folder.
function norm(p,    n, parts, out, i, k) {
    n = split(p, parts, "/"); k = 0
    for (i = 1; i <= n; i++) {
        if (parts[i] == "." || parts[i] == "") continue
        if (parts[i] == ".." && k > 0) { k--; continue }
        out[++k] = parts[i]
    }
    p = ""
    for (i = 1; i <= k; i++) p = p (i > 1 ? "/" : "") out[i]
    return p
}
function exists(p,    r, l) { r = (getline l < p); if (r >= 0) close(p); return r >= 0 }
BEGIN {
    n = split(rules, lines, "\n")
    for (i = 1; i <= n; i++) {
        if (lines[i] !~ /:/) continue
        f = lines[i]; sub(/:.*/, "", f); gsub(/[ \t]/, "", f)
        deps = lines[i]; sub(/^[^:]*:/, "", deps)
        known[f] = 1; may[f, f] = 1
        m = split(deps, ds, /[ \t,]+/)
        for (j = 1; j <= m; j++) if (ds[j] != "") may[f, ds[j]] = 1
    }
    m = split(private, ps, "\n")
    for (j = 1; j <= m; j++) if (ps[j] != "") priv[ps[j]] = 1
}
{
    file = $0; from = top(file); ln = 0
    while ((getline line < file) > 0) {
        ln++
        if (file != probe_home && line ~ /__builtin_cpu_(supports|init|is)|<cpuid\.h>|__get_cpuid|__cpuid/) {
            printf "%s:%d: asks the CPU directly (only %s may; use kernels/cpu.h)\n", file, ln, probe_home
            bad = 1
        }
        if (line !~ /^[ \t]*#[ \t]*include[ \t]*"/) continue
        inc = line; sub(/^[^"]*"/, "", inc); sub(/".*$/, "", inc)
        # As the compiler looks: next to the including file first, then from the root.
        local = norm(dir(file) "/" inc)
        target = exists(local) ? local : norm(inc)
        to = top(target)
        if (!(to in known)) {
            printf "%s:%d: %s includes %s (%s is not a layer of docs/architecture.md)\n", file, ln, file, target, to
            bad = 1
        } else if (!((from, to) in may)) {
            printf "%s:%d: %s includes %s (%s may not include %s)\n", file, ln, file, target, from, to
            bad = 1
        }
        if (target in priv && index(file, dir(target) "/") != 1) {
            printf "%s:%d: %s includes %s (private to %s/)\n", file, ln, file, target, dir(target)
            bad = 1
        }
    }
    close(file)
}
END { exit bad }
' || status=1
exit $status
