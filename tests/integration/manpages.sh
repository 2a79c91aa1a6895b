#!/bin/bash
# The man pages (#14): clean under mandoc -T lint, and checked against the
# tables they describe, so they cannot drift: every fleetctl command
# (fleetctl --commands, from its command table) has its entry in
# fleetctl(1), every fleetd.conf key (fleetd --config-keys, from the config
# key table) its entry in fleetd.conf(5). Then fleetctl's bash completion,
# driven as bash drives it, against a fleetd with an agent and a snapshot.
. "$FLEET_SRCDIR/tests/lib/common.sh"
U=mp$(test_run_id)	# agent names of this run (two checkouts at once never collide)

command -v mandoc >/dev/null || skip_all "mandoc missing (scripts/deps.sh installs it)"
[ "$(id -u)" = 0 ] || skip_all "needs root (a user agent is a Unix user)"
MAN=$FLEET_SRCDIR/man

# ---- lint --------------------------------------------------------------------------------------
# The pages name each other (.Xr), and mandoc looks each name up in the
# manpath's mandoc.db: the host's own manpath (say, a /usr/local/share/man
# whose mandoc.db predates an earlier make install) must not decide the
# result, so the lint searches only a manpath of these three pages.
mp=$TEST_TMP/manpath
mkdir -p "$mp"/man1 "$mp"/man5 "$mp"/man8
cp "$MAN/fleetctl.1" "$mp/man1/"; cp "$MAN/fleetd.conf.5" "$mp/man5/"; cp "$MAN/fleetd.8" "$mp/man8/"
makewhatis "$mp"; ok $? "makewhatis indexes the three pages"
for page in fleetctl.1 fleetd.8 fleetd.conf.5; do
	msgs=$(MANPATH=$mp mandoc -T lint -W style "$MAN/$page" 2>&1)
	is "$msgs" "" "$page is clean under mandoc -T lint"
done
# A stale mandoc.db in the host's manpath is what once failed this check.
mkdir -p "$TEST_TMP/stale/man8"
makewhatis "$TEST_TMP/stale"; cp "$MAN/fleetd.8" "$TEST_TMP/stale/man8/"
like "$(MANPATH=$TEST_TMP/stale mandoc -T lint -W style "$MAN/fleetctl.1" 2>&1)" "outdated mandoc.db" \
	"a stale mandoc.db in the manpath is noticed (and the lint above does not read the host's)"

# missing_entries PAGE LIST: the names in LIST without an ".It Cm NAME" in PAGE
missing_entries() {
	local name
	while read -r name _; do
		[ -n "$name" ] || continue
		grep -qE "^\.It Cm $name( |$)" "$1" || echo "$name"
	done <<<"$2"
}

# ---- the command table and fleetctl(1) --------------------------------------------------------
cmds=$("$FLEETCTL" --commands); ok $? "fleetctl --commands lists the command table"
printf '%s\n' "$cmds" | grep -qx doctor; ok $? "it lists doctor"
help=$("$FLEETCTL" help)
while read -r c; do
	grep -qE "^  $c " <<<"$help" || echo "$c"
done <<<"$cmds" > "$TEST_TMP/help-missing"
is "$(cat "$TEST_TMP/help-missing")" "" "fleetctl help shows the same commands"
is "$(missing_entries "$MAN/fleetctl.1" "$cmds")" "" "fleetctl(1) has an entry for every command"
# The check itself fails when a command is missing from the page.
sed '/^\.It Cm doctor/d' "$MAN/fleetctl.1" > "$TEST_TMP/fleetctl.1"
is "$(missing_entries "$TEST_TMP/fleetctl.1" "$cmds")" doctor "a page without 'doctor' is caught"

# ---- the config key table and fleetd.conf(5) --------------------------------------------------
keys=$("$FLEETD" --config-keys); ok $? "fleetd --config-keys lists the key table"
printf '%s\n' "$keys" | grep -qx "state_dir state-dir"; ok $? "each key with its option"
is "$(missing_entries "$MAN/fleetd.conf.5" "$keys")" "" "fleetd.conf(5) has an entry for every key"
while read -r key opt; do
	grep -qF ".Fl \\-$opt ." "$MAN/fleetd.conf.5" || echo "$opt"
done <<<"$keys" > "$TEST_TMP/opts-missing"
is "$(cat "$TEST_TMP/opts-missing")" "" "and names every key's option"
sed '/^\.It Cm hooks_listen /d' "$MAN/fleetd.conf.5" > "$TEST_TMP/fleetd.conf.5"
is "$(missing_entries "$TEST_TMP/fleetd.conf.5" "$keys")" hooks_listen "a page without hooks_listen is caught"
# fleetd(8) documents the options that are not keys.
for o in foreground config check-config help version; do
	grep -qF "Fl \\-$o" "$MAN/fleetd.8"; ok $? "fleetd(8) documents --$o"
done

# ---- bash completion -----------------------------------------------------------------------------
user_fleetd_setup manpages
user_fleetd_start || fail_all "fleetd does not start"
"$FLEETCTL" create $U-alpha --backend user >/dev/null; ok $? "an agent to complete"
"$FLEETCTL" snapshot $U-alpha snap-one >/dev/null; ok $? "and a snapshot of it"
mkdir -p "$TEST_TMP/bin" && ln -s "$FLEETCTL" "$TEST_TMP/bin/fleetctl"

# complete WORDS...: what the completion offers for the last word, one a line, sorted
complete_words() {
	PATH="$TEST_TMP/bin:$PATH" bash -c '
		. "$1"; shift
		COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}
		_fleetctl fleetctl "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
		printf "%s\n" "${COMPREPLY[@]}" | sort' _ "$FLEET_SRCDIR/completion/fleetctl" "$@"
}
like "$(PATH="$TEST_TMP/bin:$PATH" bash -c '. "$1"; complete -p fleetctl' _ "$FLEET_SRCDIR/completion/fleetctl")" \
	"^complete -F _fleetctl fleetctl$" "the script registers _fleetctl for fleetctl"
is "$(complete_words fleetctl '')" "$(sort <<<"$cmds")" "an empty command word completes to every command"
is "$(complete_words fleetctl res)" $'restart\nrestore' "'res' completes to restart and restore"
is "$(complete_words fleetctl do)" doctor "'do' completes to doctor"
is "$(complete_words fleetctl help sna)" $'snapshot\nsnapshots' "help completes command names"
is "$(complete_words fleetctl show mp)" $U-alpha "an agent name after show"
is "$(complete_words fleetctl -s "$SOCK" start '')" $U-alpha "with -s SOCKET, from that fleetd"
is "$(complete_words fleetctl restore $U-alpha '')" snap-one "a snapshot name after restore NAME"
is "$(complete_words fleetctl snapshot rm $U-alpha s)" snap-one "and after snapshot rm NAME"
is "$(complete_words fleetctl -s "$TEST_TMP/nothing.sock" show '')" "" "no fleetd there: nothing, no error"
"$FLEETCTL" rm --force $U-alpha >/dev/null; ok $? "the agent is removed"

done_testing
