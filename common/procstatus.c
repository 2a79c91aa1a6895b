/* proc_status_sigmask: see common/procstatus.h. */
#include "common/procstatus.h"

#include <errno.h>
#include <string.h>

static int hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int proc_status_sigmask(const char *text, size_t len, const char *field, uint64_t *mask)
{
	size_t fl = strlen(field), i = 0;

	while (i < len) {
		size_t end = i;

		while (end < len && text[end] != '\n')
			end++;
		/* "FIELD:" at the start of this line, then blanks, then the value up to the line's end */
		if (end - i > fl && memcmp(text + i, field, fl) == 0 && text[i + fl] == ':') {
			size_t p = i + fl + 1, digits = 0;
			uint64_t v = 0;

			while (p < end && (text[p] == '\t' || text[p] == ' '))
				p++;
			for (; p < end; p++, digits++) {
				int d = hex_digit(text[p]);

				if (d < 0 || digits == 16)
					return -EINVAL;
				v = v << 4 | (uint64_t)d;
			}
			if (digits == 0)
				return -EINVAL;
			*mask = v;
			return 0;
		}
		i = end + 1;
	}
	return -EINVAL;
}
