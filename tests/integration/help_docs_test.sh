#!/usr/bin/env bash
# ddprun --help, the man page and docs/launching.md show the options in the same sections,
# in the same order; the bash completion knows every option --help shows, and skips the
# value of every option that takes one (in both spellings). Short names are not offered.
set -euo pipefail
ddprun=$1
source_dir=$2
fail() { echo "FAIL: $*" >&2; exit 1; }
help=$("$ddprun" --help)

# A section's heading: a line of its own after an empty one, ending in ':'.
sections() {
  awk 'prev == "" && /^[A-Za-z][^:]*:$/ { print } { prev = $0 }' |
    grep -v -x -e 'Help:' -e 'Examples:' | sed 's/:$//'
}
help_sections=$(sections <<<"$help")
(($(wc -l <<<"$help_sections") >= 6)) || fail "--help has fewer than six sections"
man_sections=$(sed -n 's/^\.SS "\(.*\)"$/\1/p' "$source_dir/docs/ddprun.1")
[[ $man_sections == "$help_sections" ]] ||
  fail "the man page's sections differ from --help's: $(diff <(echo "$help_sections") <(echo "$man_sections"))"
doc_sections=$(sed -n 's/^### //p' "$source_dir/docs/launching.md")
[[ $doc_sections == "$help_sections" ]] ||
  fail "launching.md's sections differ from --help's: $(diff <(echo "$help_sections") <(echo "$doc_sections"))"

# An option line: "  -r, --redirects 0|1|2|3|LR:N,...   Keep ..." (torchrun's underscore
# spellings are listed in a paragraph of their own, not on option lines).
completion=$source_dir/scripts/ddprun-completion.bash
words=$(grep -o 'compgen -W "--nproc-per-node[^"]*"' "$completion")
skipped=$(grep -F '((i++))' "$completion")
while IFS= read -r line; do
  names=${line#  }
  names=${names%%  *}  # the description starts two spaces or more after the names
  value=
  for word in ${names//,/ }; do
    [[ $word == -* ]] || { value=$word; continue; }
    [[ $word == *_* ]] && continue
    [[ $word == --* ]] || continue  # the completion offers long names only
    grep -qE -- "[\" ]${word}[\" ]" <<<"$words" || fail "the completion does not offer $word"
  done
  [[ -n $value && $value != \[* ]] || continue
  for word in ${names//,/ }; do
    [[ $word == -* ]] || continue
    spellings=$word
    underscore=--$(tr - _ <<<"${word#--}")
    [[ $underscore != "$word" && $help == *"$underscore,"* || $help == *"$underscore." ]] &&
      spellings+=" $underscore"
    for spelling in $spellings; do
      grep -qE -- "[ |]${spelling}[|)]" <<<"$skipped" ||
        fail "the completion does not skip the value of $spelling"
    done
  done
done < <(grep -E '^  -' <<<"$help" | grep -v -E '^  --[a-z]+_')
echo "ok: $(wc -l <<<"$help_sections") sections in --help, the man page and launching.md"
