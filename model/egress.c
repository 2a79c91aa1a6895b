/* egress: see egress.h. Addresses are checked with inet_pton, never by hand. */
#include "model/egress.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "common/util.h"

/* A DNS name: labels of letters, digits and '-', not starting or ending with '-', separated by dots. */
static bool host_valid(const char *s)
{
	size_t len = strlen(s), label = 0;
	bool alpha = false;

	if (len == 0 || len > 253 || s[0] == '.' || s[len - 1] == '.')
		return false;
	for (size_t i = 0; i < len; i++) {
		char c = s[i];

		if (c == '.') {
			if (label == 0 || s[i - 1] == '-')
				return false;
			label = 0;
			continue;
		}
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-'))
			return false;
		if (c == '-' && label == 0)
			return false;
		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
			alpha = true;
		if (++label > 63)
			return false;
	}
	return alpha && s[len - 1] != '-';	/* all digits would be an address gone wrong */
}

/* ADDR or ADDR/PREFIX into e->cidr (with its prefix always written) and e->family. */
static int addr_parse(const char *s, struct egress_entry *e)
{
	char addr[INET6_ADDRSTRLEN];
	unsigned char buf[16];
	const char *slash = strchr(s, '/');
	size_t alen = slash ? (size_t)(slash - s) : strlen(s);
	long prefix, max;

	if (alen == 0 || alen >= sizeof(addr))
		return -EINVAL;
	memcpy(addr, s, alen);
	addr[alen] = '\0';
	if (inet_pton(AF_INET, addr, buf) == 1)
		e->family = AF_INET, max = 32;
	else if (inet_pton(AF_INET6, addr, buf) == 1)
		e->family = AF_INET6, max = 128;
	else
		return -EINVAL;
	prefix = max;
	if (slash && parse_long(slash + 1, 0, max, &prefix) < 0)
		return -EINVAL;
	snprintf(e->cidr, sizeof(e->cidr), "%s/%ld", addr, prefix);
	return 0;
}

static int entry_parse(char *s, struct egress_entry *e, const char **why)
{
	char *port = NULL, *colon;
	long p;

	memset(e, 0, sizeof(*e));
	if (s[0] == '[') {
		char *end = strchr(s, ']');

		if (!end || (end[1] != '\0' && end[1] != ':')) {
			*why = "an IPv6 entry with a port is written [ADDR]:PORT";
			return -EINVAL;
		}
		*end = '\0';
		port = end[1] == ':' ? end + 2 : NULL;
		s++;
	} else if ((colon = strchr(s, ':')) && !strchr(colon + 1, ':')) {
		*colon = '\0';	/* one colon: HOST:PORT or ADDR:PORT; more: a bare IPv6 address */
		port = colon + 1;
	}
	if (port && parse_long(port, 1, 65535, &p) < 0) {
		*why = "a port must be a number from 1 to 65535";
		return -EINVAL;
	}
	e->port = port ? (int)p : 0;
	if (addr_parse(s, e) == 0)
		return 0;
	if (strchr(s, '/') || strchr(s, ':') || !host_valid(s)) {
		*why = "an entry must be a host name, an address or a CIDR, with an optional :PORT";
		return -EINVAL;
	}
	snprintf(e->host, sizeof(e->host), "%s", s);
	return 0;
}

int egress_parse(const char *list, struct egress_entry **ret, size_t *n, const char **why)
{
	_cleanup_free_ char *copy = NULL;
	_cleanup_free_ struct egress_entry *v = NULL;
	size_t count = 0;
	char *save = NULL;

	if (!list || !*list || strlen(list) > EGRESS_LIST_MAX) {
		*why = "egress_allow must be 1 to 2048 characters";
		return -EINVAL;
	}
	copy = xstrdup(list);
	v = xcalloc(EGRESS_ENTRIES_MAX, sizeof(*v));
	for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		while (*tok == ' ')
			tok++;
		if (!*tok)
			continue;
		if (count == EGRESS_ENTRIES_MAX) {
			*why = "egress_allow has more than 64 entries";
			return -EINVAL;
		}
		if (entry_parse(tok, &v[count], why) < 0)
			return -EINVAL;
		count++;
	}
	if (count == 0) {
		*why = "egress_allow lists nothing";
		return -EINVAL;
	}
	*ret = v;
	v = NULL;
	*n = count;
	return 0;
}
