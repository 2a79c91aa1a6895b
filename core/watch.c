/* watch: see watch.h. */
#include "core/watch.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/util.h"
#include "model/fleetd.h"

struct watcher {
	struct watcher *next;
	char *agent;		/* only this agent's events; NULL: all */
	watch_line_fn on_line;
	void *userdata;
	bool gone;		/* unsubscribed while events were being handed out */
};

struct watch_bus {
	struct watcher *head;
	size_t n;
	uint64_t seq;
	int publishing;		/* depth: unsubscribing inside a publish only marks the watcher */
};

static void watcher_free(struct watcher *w)
{
	free(w->agent);
	free(w);
}

/* Drop the watchers marked gone (after a publish, when no one walks the list). */
static void sweep(struct watch_bus *bus)
{
	for (struct watcher **p = &bus->head; *p;) {
		struct watcher *w = *p;

		if (w->gone) {
			*p = w->next;
			watcher_free(w);
		} else {
			p = &w->next;
		}
	}
}

bool watch_active(const struct fleetd *f)
{
	return f->watch && f->watch->head;
}

void watch_publish(struct fleetd *f, const char *type, const char *agent, json_t *fields)
{
	struct watch_bus *bus = f->watch;
	struct timespec now;
	json_t *ev;
	char *line;
	size_t len;

	if (!bus || !bus->head) {
		json_decref(fields);
		return;
	}
	/* Wall-clock Unix ms, as docs/api.md says (now_usec() is the monotonic clock). */
	clock_gettime(CLOCK_REALTIME, &now);
	ev = json_pack("{s:I, s:I, s:s}", "seq", (json_int_t)++bus->seq, "time",
		       (json_int_t)now.tv_sec * 1000 + now.tv_nsec / 1000000, "type", type);
	if (!ev)
		abort();
	if (agent)
		json_object_set_new(ev, "agent", json_string(agent));
	if (fields)
		json_object_update_missing(ev, fields);
	json_decref(fields);
	line = json_dumps(ev, JSON_COMPACT);
	json_decref(ev);
	if (!line)
		abort();
	len = strlen(line);
	line = xrealloc(line, len + 2);
	line[len++] = '\n';
	line[len] = '\0';
	bus->publishing++;
	for (struct watcher *w = bus->head; w; w = w->next)
		if (!w->gone && (!w->agent || (agent && strcmp(w->agent, agent) == 0)))
			w->on_line(w->userdata, line, len);
	if (--bus->publishing == 0)
		sweep(bus);
	free(line);
}

struct watcher *watch_subscribe(struct fleetd *f, const char *agent, watch_line_fn on_line, void *userdata)
{
	struct watch_bus *bus = f->watch;
	struct watcher *w = xcalloc(1, sizeof(*w));

	if (!bus)
		bus = f->watch = xcalloc(1, sizeof(*bus));
	w->agent = agent ? xstrdup(agent) : NULL;
	w->on_line = on_line;
	w->userdata = userdata;
	w->next = bus->head;
	bus->head = w;
	bus->n++;
	return w;
}

void watch_unsubscribe(struct fleetd *f, struct watcher *w)
{
	struct watch_bus *bus = f->watch;

	if (!w || w->gone)
		return;
	w->gone = true;
	bus->n--;
	if (bus->publishing == 0)
		sweep(bus);
}

size_t watch_count(const struct fleetd *f)
{
	const struct watch_bus *bus = f->watch;

	return bus ? bus->n : 0;
}

void watch_free(struct fleetd *f)
{
	struct watch_bus *bus = f->watch;

	if (!bus)
		return;
	while (bus->head) {
		struct watcher *w = bus->head;

		bus->head = w->next;
		watcher_free(w);
	}
	free(bus);
	f->watch = NULL;
}
