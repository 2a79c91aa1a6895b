/*
 * fleetctl watch [AGENT]: follow GET /v1/watch until interrupted, one
 * event per line: fleetd's JSON line as it is with --json, else a
 * readable line (time, type, agent, then the event's other fields).
 */
#include "ctl/commands.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "common/termsafe.h"
#include "ctl/http_client.h"

struct watch_out {
	bool json;
	bool tty;		/* stdout is a terminal: text from agents is made safe for it */
	char *overflow;		/* fleetd's last line when it cut this watcher off */
};

/* A value for the readable line: a string as it is, anything else as JSON. */
static char *value_text(json_t *v)
{
	if (json_is_string(v))
		return xstrdup(json_string_value(v));
	return json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
}

static void print_readable(struct watch_out *o, json_t *ev)
{
	char when[32];
	const char *k;
	json_t *v;
	char *line = NULL, *shown;
	size_t len = 0;
	FILE *f = open_memstream(&line, &len);

	if (!f)
		return;
	fprintf(f, "%s %-17s %-16s", format_utc(num(ev, "time") / 1000, when, sizeof(when)), str(ev, "type"),
		json_object_get(ev, "agent") ? str(ev, "agent") : "-");
	json_object_foreach(ev, k, v) {
		char *text;

		if (!strcmp(k, "seq") || !strcmp(k, "time") || !strcmp(k, "type") || !strcmp(k, "agent") || json_is_null(v))
			continue;
		text = value_text(v);
		fprintf(f, " %s=%s", k, text ? text : "?");
		free(text);
	}
	fclose(f);
	/* Health details and errors hold what an agent printed: no escape sequences to a terminal. */
	shown = o->tty ? term_sanitize(line, len, NULL) : xstrdup(line);
	puts(shown);
	free(shown);
	free(line);
}

static int watch_line(void *ud, const char *line, size_t len)
{
	struct watch_out *o = ud;
	_cleanup_(json_decrefp) json_t *ev = json_loadb(line, len, 0, NULL);
	const char *type = json_string_value(json_object_get(ev, "type"));

	if (!ev || !type) {
		fprintf(stderr, "fleetctl: fleetd sent a watch line that is not an event\n");
		return -EPROTO;
	}
	if (strcmp(type, "overflow") == 0) {
		free(o->overflow);
		o->overflow = xstrdup(str(ev, "error"));
	}
	if (o->json) {
		fwrite(line, 1, len, stdout);
		putchar('\n');
	} else if (strcmp(type, "watching") == 0) {
		fprintf(stderr, "fleetctl: watching %s%s (Ctrl-C stops)\n", json_is_string(json_object_get(ev, "agent")) ? "agent " : "every agent",
			json_is_string(json_object_get(ev, "agent")) ? str(ev, "agent") : "");
	} else if (strcmp(type, "overflow") != 0) {
		print_readable(o, ev);
	}
	fflush(stdout);	/* a line as it happens, also into a pipe */
	return 0;
}

int cmd_watch(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	struct watch_out o = { .json = ctl->json, .tty = isatty(STDOUT_FILENO) };
	struct http_response err = { 0 };
	_cleanup_free_ char *path = NULL;
	int r;

	if ((r = parse_opts(cmd, argc, argv, help_only, no_opts, NULL)) != 0)
		return r < 0 ? EXIT_USAGE : 0;
	if (argc - optind > 1)
		return usage_error(cmd, "watch takes at most one agent NAME");
	if (argc - optind == 1 && !name_ok(cmd, argv[optind]))
		return EXIT_USAGE;
	path = argc - optind == 1 ? xasprintf("/v1/watch?agent=%s", argv[optind]) : xstrdup("/v1/watch");
	r = http_request_lines(ctl->socket, "GET", path, NULL, 0, watch_line, &o, &err);
	if (o.overflow) {
		fprintf(stderr, "fleetctl: fleetd cut this watch off: %s\n", o.overflow);
		free(o.overflow);
		return 1;
	}
	if (r < 0) {
		if (r != -EPROTO && !print_not_running(ctl, r))
			fprintf(stderr, "fleetctl: watch stream from fleetd broke off: %s\n", strerror(-r));
		return 1;
	}
	if (r != 200) {
		_cleanup_(json_decrefp) json_t *e = json_loadb(err.body ? err.body : "", err.body_len, 0, NULL);
		fprintf(stderr, "fleetctl: %s\n", e ? str(e, "error") : "watch failed");
		http_response_free(&err);
		return 1;
	}
	fprintf(stderr, "fleetctl: fleetd ended the watch (it is stopping)\n");
	return 1;
}
