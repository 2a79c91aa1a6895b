/* hooks/route.c: a subscription's --events filter against event types, and the checks of names and lists. */
#include <errno.h>
#include <string.h>

#include "hooks/route.h"
#include "tests/tap.h"

int main(void)
{
	const char *why = NULL;

	/* No filter: every event, also one without a type. */
	ok(hook_events_match(NULL, "push"), "no filter takes push");
	ok(hook_events_match(NULL, NULL), "no filter takes a delivery without a type");
	/* Exact types. */
	ok(hook_events_match("push", "push"), "push takes push");
	ok(!hook_events_match("push", "pull_request.opened"), "push does not take pull_request.opened");
	ok(hook_events_match("push,issues", "issues"), "the second entry of a list counts");
	ok(!hook_events_match("push,issues", "issue"), "a shorter type is no match");
	ok(!hook_events_match("push", "pushed"), "a longer type is no match (no prefix matching)");
	ok(!hook_events_match("Push", "push"), "case matters");
	ok(!hook_events_match("push", NULL), "a filter does not take a delivery without a type");
	/* GitHub's event plus action. */
	ok(hook_events_match("pull_request", "pull_request.opened"), "pull_request takes pull_request.opened");
	ok(hook_events_match("pull_request.opened", "pull_request.opened"), "pull_request.opened takes itself");
	ok(!hook_events_match("pull_request.opened", "pull_request.closed"), "but not another action");
	ok(!hook_events_match("pull_request.opened", "pull_request"), "nor the event without an action");
	ok(!hook_events_match("pull", "pull_request.opened"), "a prefix that is not the whole event is no match");
	ok(!hook_events_match("pull_request_review", "pull_request.opened"), "a longer event is no match");
	ok(hook_events_match("issues,pull_request", "pull_request.synchronize"), "event entries in a list");
	ok(!hook_events_match("", "push"), "an empty filter takes nothing");

	/* The checks the filter went through when it was stored. */
	is_int(hook_events_check("push,pull_request.opened", &why), 0, "a list of types is valid");
	is_int(hook_events_check("push,,issues", &why), -EINVAL, "an empty entry is refused");
	is_int(hook_events_check("push issues", &why), -EINVAL, "a space is refused");
	is_int(hook_route_name_check("triage-github", &why), 0, "a route name");
	is_int(hook_route_name_check("-x", &why), -EINVAL, "a route name does not start with '-'");
	return tap_done();
}
