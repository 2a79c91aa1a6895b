/* route: see route.h. */
#include "hooks/route.h"

#include <errno.h>
#include <string.h>

int hook_route_name_check(const char *name, const char **why)
{
	size_t n = name ? strlen(name) : 0;

	if (n == 0 || n > HOOK_ROUTE_NAME_MAX) {
		*why = "a route name is 1 to 48 characters";
		return -EINVAL;
	}
	for (size_t i = 0; i < n; i++) {
		char ch = name[i];
		int ok = (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || (i > 0 && (ch == '-' || ch == '_'));

		if (!ok) {
			*why = "a route name is lower-case letters, digits, '-' and '_', starting with a letter or digit";
			return -EINVAL;
		}
	}
	return 0;
}

int hook_events_check(const char *list, const char **why)
{
	size_t len = 0, count = 0;

	if (!list || !*list) {
		*why = "the event list is empty";
		return -EINVAL;
	}
	for (const char *p = list;; p++) {
		if (*p == ',' || *p == '\0') {
			if (len == 0) {
				*why = "an event type in the list is empty";
				return -EINVAL;
			}
			if (++count > HOOK_EVENTS_MAX) {
				*why = "at most 32 event types";
				return -EINVAL;
			}
			len = 0;
			if (*p == '\0')
				return 0;
			continue;
		}
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
		      strchr("_.:-", *p))) {
			*why = "an event type is letters, digits, '_', '.', ':' and '-'";
			return -EINVAL;
		}
		if (++len > HOOK_EVENT_TYPE_MAX) {
			*why = "an event type is at most 64 characters";
			return -EINVAL;
		}
	}
}

/* An HTTP token's character (RFC 9110 tchar). A test, not strspn: that builds its table on every call. */
static bool tchar(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c));
}

int hook_header_check(const char *name, const char **why)
{
	size_t n = 0;

	while (name && n <= 64 && tchar((unsigned char)name[n]))
		n++;
	if (n == 0 || n > 64 || name[n] != '\0') {
		*why = "a header name is 1 to 64 letters, digits or '-' (an HTTP token)";
		return -EINVAL;
	}
	return 0;
}

bool hook_events_match(const char *filter, const char *type)
{
	size_t tn;

	if (!filter)
		return true;
	if (!type)
		return false;
	tn = strlen(type);
	for (const char *p = filter; *p;) {
		size_t n = strcspn(p, ",");

		/* the entry is the type, or the type is the entry followed by ".ACTION" */
		if (n > 0 && n <= tn && strncmp(p, type, n) == 0 && (n == tn || type[n] == '.'))
			return true;
		p += n;
		if (*p == ',')
			p++;
	}
	return false;
}
