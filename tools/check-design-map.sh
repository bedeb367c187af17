#!/bin/sh
# check-design-map.sh - docs/design.md's map ("The map of the house") names every file of
# preload/, lua/, cli/ and tools/, and no file that is gone: a map that drifts from the tree
# misleads the newcomer it is written for. One line per file the map does not name, and per name
# in the map that no longer exists; exit 1 if there is any.
#
# A map entry is a bullet whose first words are paths in backquotes, before its colon:
#   - `preload/sem/kept.[ch]`: ...        (X.[ch]: both X.c and X.h)
#   - `lua/protocol/acquire.def`, `lua/protocol/release.def`: ...
# Paths under build/ are made by the build: each must still be named by the Makefile or a file of
# tools/ (a NAME in it stands for any name and is not checked).
set -eu
cd "$(dirname "$0")/.."
doc=docs/design.md
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The map's section, its bullets joined into one line each, then the paths each names first.
awk '
    /^## The map of the house/ { on = 1; next }
    on && /^##? / { on = 0 }
    !on { next }
    /^- / { if (b != "") print b; b = substr($0, 3); next }
    /^  / && b != "" { sub(/^ +/, " "); b = b $0; next }
    { if (b != "") print b; b = "" }
    END { if (b != "") print b }
' "$doc" | awk '
    {
        s = $0
        while (substr(s, 1, 1) == "`") {
            s = substr(s, 2)
            i = index(s, "`")
            if (i == 0) break
            print substr(s, 1, i - 1)
            s = substr(s, i + 1)
            sub(/^(, | and |,? )/, "", s)
        }
    }
' | awk '
    /\.\[ch\]$/ { sub(/\[ch\]$/, ""); print $0 "c"; print $0 "h"; next }
    { print }
' | sort -u >"$tmp/named"

if [ ! -s "$tmp/named" ]; then
    echo "check-design-map: $doc has no map (the section \"## The map of the house\")" >&2
    exit 1
fi

# The tree's files (dot files aside: an editor's swap file is not a source).
find preload lua cli tools -type f ! -name '.*' | sort >"$tmp/files"

bad=0
for f in $(comm -23 "$tmp/files" "$tmp/named"); do
    echo "check-design-map: $f is not in $doc's map (\"The map of the house\"): give it a line" >&2
    bad=1
done
for f in $(comm -13 "$tmp/files" "$tmp/named"); do
    case $f in
    build/*NAME*) ;;
    build/*)
        made=${f#build/gen/}
        if ! grep -q -F -e "$made" Makefile tools/*; then
            echo "check-design-map: $doc's map names $f, which nothing in the Makefile or tools/ makes" >&2
            bad=1
        fi
        ;;
    *)
        echo "check-design-map: $doc's map names $f, which does not exist" >&2
        bad=1
        ;;
    esac
done
[ "$bad" -eq 0 ] || exit 1
echo "check-design-map: $doc's map names every file of preload/, lua/, cli/ and tools/"
