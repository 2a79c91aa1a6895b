#!/bin/bash
# An exec's environment with a real guest. What --env sets reaches only the
# command, after agentd run-as dropped to the agent user: a library the
# agent plants in its home and names in LD_PRELOAD or LD_LIBRARY_PATH loads
# for its own command (a positive control), never into a process that runs
# as guest root, unless --root asked for root. The command gets a clean,
# fixed HOME/USER/PATH and its own session. A failing health check shows
# what the check printed and its exit status (not the SSH server's log).
. "$FLEET_SRCDIR/tests/lib/common.sh"

command -v gcc >/dev/null || skip_all "gcc not installed (it builds the planted library)"
command -v jq >/dev/null || skip_all "jq not installed"
. "$FLEET_SRCDIR/tests/lib/vmfleet.sh"
vmfleet_setup --tcg

unlike() {	# unlike TEXT PATTERN DESCRIPTION (grep -E)
	if printf '%s' "$1" | grep -qE -- "$2"; then ok 1 "$3"; echo "#   '$1'"; echo "#   matches /$2/"; else ok 0 "$3"; fi
}

A=eenv
ex() { "$FLEETCTL" exec "$A" "$@"; }
# marks: which /tmp/preload-uid-* files the guest holds (checked as root).
marks() { ex --root -- sh -c 'cd /tmp && ls -1 preload-uid-* 2>/dev/null | tr "\n" " "'; }
clear_marks() { ex --root -- sh -c 'rm -f /tmp/preload-uid-*'; }

# The planted library: its constructor records the euid it ran with. The
# guest's agentd and dropbear are the host's glibc build (images/build-image.sh).
cat > "$TEST_TMP/mark.c" <<'EOF'
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
static void mark(void)
{
	char p[64];
	snprintf(p, sizeof(p), "/tmp/preload-uid-%d", (int)geteuid());
	close(open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
}
__attribute__((constructor)) static void ctor(void) { mark(); }
EOF
gcc -shared -fPIC -o "$TEST_TMP/x.so" "$TEST_TMP/mark.c"; ok $? "build the LD_PRELOAD library on the host"
# The agent's own dynamically linked program: agentd is static where the
# build allows (configure.ac) and busybox is, so neither can show a load.
echo 'int main(void) { return 0; }' > "$TEST_TMP/dyn.c"
gcc -o "$TEST_TMP/dyn" "$TEST_TMP/dyn.c"; ok $? "build a dynamically linked program on the host"
# For LD_LIBRARY_PATH: a "libc.so.6" that filters the real libc (so the
# program still runs) and carries the constructor. ld.so wants the version
# names the program needs, and two locking functions and the early init of
# whatever is called libc.so.6 first.
LIBC=$(ldd "$TEST_TMP/dyn" | awk '$1 == "libc.so.6" {print $3}')
{
	echo 'GLIBC_2.2.5 { global: pthread_mutex_lock; pthread_mutex_unlock; local: *; };'
	prev=GLIBC_2.2.5
	for v in $(readelf -V "$TEST_TMP/dyn" | grep -o 'Name: GLIBC_[0-9.]*' | cut -d' ' -f2 | sort -uV); do
		[ "$v" = GLIBC_2.2.5 ] && continue
		echo "$v { } $prev;"
		prev=$v
	done
	echo "GLIBC_PRIVATE { global: __libc_early_init; } $prev;"
} > "$TEST_TMP/libc.map"
cat "$TEST_TMP/mark.c" - > "$TEST_TMP/fakelibc.c" <<'EOF'
int pthread_mutex_lock(void *m) { (void)m; return 0; }
int pthread_mutex_unlock(void *m) { (void)m; return 0; }
void __libc_early_init(_Bool initial) { (void)initial; }
EOF
gcc -shared -fPIC -nostdlib -o "$TEST_TMP/libc.so.6" "$TEST_TMP/fakelibc.c" -Wl,-soname,libc.so.6 \
	-Wl,--version-script,"$TEST_TMP/libc.map" -Wl,--filter,"$LIBC"
ok $? "build the LD_LIBRARY_PATH libc.so.6 on the host"

fleetd_ns_start; ok $? "fleetd starts inside the namespace"
"$FLEETCTL" create "$A" --backend vm >/dev/null; ok $? "create a VM agent"
"$FLEETCTL" start "$A" >/dev/null; ok $? "start it"

AUID=$(ex -- id -u)
like "$AUID" '^[1-9][0-9]*$' "the agent's uid is not 0 ($AUID)"
ex -- sh -c 'cat > /home/agent/x.so' < "$TEST_TMP/x.so"; ok $? "the agent puts x.so in its home"
ex -- sh -c 'cat > /home/agent/dyn && chmod +x /home/agent/dyn' < "$TEST_TMP/dyn"; ok $? "and a program of its own"
ex -- sh -c 'mkdir -p /home/agent/lib && cat > /home/agent/lib/libc.so.6' < "$TEST_TMP/libc.so.6"
ok $? "and a libc.so.6 in ~/lib"
clear_marks
is "$(marks)" "" "no marks in the guest's /tmp yet"

# LD_PRELOAD: the command is dynamically linked; root's agentd runs first.
ex --env LD_PRELOAD=/home/agent/x.so -- /home/agent/dyn; ok $? "exec --env LD_PRELOAD=~/x.so"
m=$(marks)
unlike "$m" "preload-uid-0 " "LD_PRELOAD did not run the agent's library as guest root ($m)"
like "$m" "preload-uid-$AUID " "but it did load for the agent's own command (as uid $AUID)"
ex --env LD_PRELOAD=/home/agent/x.so -- true; ok $? "exec --env LD_PRELOAD=~/x.so -- true"
unlike "$(marks)" "preload-uid-0 " "not as root with a static command either"
clear_marks

# LD_LIBRARY_PATH: ld.so would take the agent's libc.so.6 for a dynamic program run as root.
ex --env LD_LIBRARY_PATH=/home/agent/lib -- /home/agent/dyn
ok $? "exec --env LD_LIBRARY_PATH=~/lib"
m=$(marks)
unlike "$m" "preload-uid-0 " "LD_LIBRARY_PATH did not run the agent's library as guest root ($m)"
like "$m" "preload-uid-$AUID " "but it did load for the agent's own command"
clear_marks

# Asked for: --root runs the command as root, and the env then is root's to give.
ex --root --env LD_PRELOAD=/home/agent/x.so -- /home/agent/dyn
ok $? "exec --root --env LD_PRELOAD=~/x.so"
like "$(marks)" "preload-uid-0 " "with --root the library runs as root, as asked"
clear_marks

# The environment the command sees.
is "$(ex --env FLEET_T1='a b $x' -- sh -c 'echo "$FLEET_T1"')" 'a b $x' "--env reaches the command literally"
is "$(ex -- sh -c 'echo "$HOME|$USER|$LOGNAME"')" "/home/agent|agent|agent" "HOME, USER and LOGNAME are the agent's"
like "$(ex -- sh -c 'echo "$PATH"')" "^/home/agent/.local/bin:" "PATH starts with the agent's ~/.local/bin"
is "$(ex -- sh -c 'echo "${SSH_CONNECTION-unset}|${SSH_CLIENT-unset}"')" "unset|unset" \
	"nothing of the SSH session's environment reaches the command"
is "$(ex --root -- sh -c 'echo "$HOME|$USER"')" "/root|root" "--root: root's HOME and USER"
is "$(ex --root -- sh -c 'echo ${SSH_CONNECTION-unset}')" unset "--root gets a clean environment too"
# Field 6 of /proc/PID/stat is the session id: the command (sh, exec'd by agentd) leads its own.
is "$(ex -- sh -c 'set -- $(cat /proc/$$/stat); [ "$6" = $$ ] && echo leader')" leader \
	"the command leads its own session"
is "$(ex --root -- sh -c 'set -- $(cat /proc/$$/stat); [ "$6" = $$ ] && echo leader')" leader \
	"so does a --root command"

# Secrets (#12): a run in the guest gets its agent's secret in its environment, and no process
# in the guest shows the value in its command line (the env travels on the exec's stdin).
SV="gs-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
printf '%s' "$SV" | "$FLEETCTL" secret set "$A" GUEST_TOKEN >/dev/null; ok $? "set a secret"
is "$(ex --secrets -- sh -c 'echo "$GUEST_TOKEN"')" "$SV" "exec --secrets in the guest sees it"
is "$(ex -- sh -c 'echo "${GUEST_TOKEN-unset}"')" unset "exec without --secrets does not"
# The check after the run must be over before the health checks below: only it runs (interval 0).
"$FLEETCTL" set "$A" --command 'echo "seen=$GUEST_TOKEN"; exec sleep 300' \
	--health-cmd 'echo after-the-secret-run' --health-interval 0 >/dev/null
run=$("$FLEETCTL" --json trigger "$A" | jq -r .id)
# Not by its log: the run's output is redacted on its way there, and the
# redactor holds back the last bytes (where a value could begin) until more
# output comes or the run ends, so "seen=" shows up only after the run.
deadline=$((SECONDS + 300))
until ex --root -- ps 2>/dev/null | grep -q "sleep 300" || [ $SECONDS -ge $deadline ]; do sleep 1; done
procs=$(ex --root -- sh -c 'for f in /proc/[0-9]*/cmdline; do tr "\0" " " < "$f"; echo; done; ps')
like "$procs" "sleep 300" "positive control: the guest's process list shows the run's command"
spid=$(ex --root -- sh -c 'for d in /proc/[0-9]*; do [ "$(tr "\0" " " < $d/cmdline)" = "sleep 300 " ] && echo ${d#/proc/}; done' | head -1)
ex --root -- sh -c "tr '\0' '\n' < /proc/$spid/environ" | grep -qxF "GUEST_TOKEN=$SV"
ok $? "positive control: the run's own environ in the guest holds the secret (pid $spid)"
grep -qF "$SV" <<<"$procs"; is $? 1 "no command line in the guest (/proc/*/cmdline, ps) holds the value"
"$FLEETCTL" cancel "$A" "$run" >/dev/null; ok $? "cancel the run"
deadline=$((SECONDS + 120))
while [ "$("$FLEETCTL" --json runs "$A" "$run" | jq -r .state)" = running ] && [ $SECONDS -lt $deadline ]; do sleep 1; done
# The value was in its environment: its log has the marker where the run printed it.
is "$("$FLEETCTL" logs "$A" "$run" 2>/dev/null | head -1)" "seen=[secret GUEST_TOKEN]" \
	"a run in the guest saw its secret (its log shows the marker in its place)"
until [ "$("$FLEETCTL" --json show "$A" | jq -r .health.detail)" = after-the-secret-run ] || [ $SECONDS -ge $deadline ]; do
	sleep 1
done
is "$("$FLEETCTL" --json show "$A" | jq -r .health.detail)" after-the-secret-run "the check after the run is over"
grep -qF "$SV" "$STATE/fleetd.log"; is $? 1 "fleetd's log does not hold the value"

# Secret files in the guest: on a tmpfs of the exec's own (agentd run-as --files-stdin), never the disk.
out=$(ex --secret-files -- sh -c 'cd "$FLEET_SECRETS_DIR" && stat -f -c %T . && stat -c "%n %a %U" * && cat GUEST_TOKEN; echo "|${GUEST_TOKEN-unset}"')
like "$out" "^tmpfs" "exec --secret-files in the guest: the files are on a tmpfs"
like "$out" "GUEST_TOKEN 400 agent" "each file 0400, the agent's"
like "$out" "$SV\|unset$" "the file holds the value; the environment does not"
is "$(ex --root -- sh -c 'ls -A /run/secrets 2>/dev/null | wc -l')" 0 "guest root's /run/secrets holds nothing: the tmpfs was the exec's own"
"$FLEETCTL" set "$A" --secret-files on --command 'echo "file=$(cat "$FLEET_SECRETS_DIR/GUEST_TOKEN")"' >/dev/null
ok $? "set --secret-files on for the VM agent"
run=$("$FLEETCTL" --json trigger "$A" --wait 2>/dev/null | jq -r .id)
is "$("$FLEETCTL" --json runs "$A" "$run" | jq -r .state)" succeeded "a run with secret files succeeds in the guest"
is "$("$FLEETCTL" logs "$A" "$run" 2>/dev/null | head -1)" "file=[secret GUEST_TOKEN]" "it read its secret from the file (redacted in its log)"
ex --root -- sh -c 'sync; grep -rqsF "'"$SV"'" /home /root /tmp /var /etc /run'; is $? 1 \
	"no file on the guest's disk (nor in /run) holds the value afterwards"
"$FLEETCTL" set "$A" --secret-files off >/dev/null

# A failing health check says what it printed and how it exited.
"$FLEETCTL" set "$A" --health-cmd 'echo the-check-said-this; echo and-this-on-stderr >&2; exit 5' >/dev/null
ok $? "set a health check that prints and exits 5"
out=$("$FLEETCTL" health "$A" 2>&1); rc=$?
is "$rc" 3 "fleetctl health exits 3 (unhealthy)"
like "$out" "exit status 5: the-check-said-this; stderr: and-this-on-stderr\)$" \
	"the health detail: its exit status, what it printed on stdout and on stderr ($out)"
unlike "$out" "Exit \(|Child failed" "not the SSH server's log"
show=$("$FLEETCTL" show "$A")
like "$show" "health: .*the-check-said-this" "fleetctl show has the check's output"
like "$show" "health: .*exit status 5" "and its exit status"
"$FLEETCTL" set "$A" --health-cmd 'exit 4' >/dev/null
like "$("$FLEETCTL" health "$A" 2>&1)" "exit status 4\)?$" "a silent failing check: just its exit status"

# Without /bin/sh the check (sh -c CMD) cannot run: agentd, root's login shell, says which program.
ex --root -- /bin/busybox mv /bin/sh /bin/sh.off; ok $? "(guest root moves /bin/sh away)"
out=$("$FLEETCTL" health "$A" 2>&1)
like "$out" "unhealthy \(exit status 127: agentd: /bin/sh: No such file or directory" \
	"a check whose /bin/sh is missing says so ($out)"
# Without root's login shell (agentd, images/README.md), dropbear's log line is all there is:
# say the check did not start.
ex --root -- /bin/busybox mv /usr/bin/agentd /usr/bin/agentd.off; ok $? "(guest root moves agentd away)"
out=$("$FLEETCTL" health "$A" 2>&1)
like "$out" "unhealthy \(the check did not start: the environment's shell did not run" \
	"a check whose login shell cannot start says so ($out)"
unlike "$out" "exit status" "rather than an exit status of the SSH server's"

"$FLEETCTL" rm --force "$A" >/dev/null; ok $? "rm"
done_testing
