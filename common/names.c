/* names: see names.h. */
#include "common/names.h"

#include <errno.h>
#include <string.h>

int agent_name_check(const char *name, const char **why)
{
	const char *dummy;
	size_t len;

	if (!why)
		why = &dummy;
	if (!name || !*name) {
		*why = "name is empty";
		return -EINVAL;
	}
	len = strlen(name);
	if (len > AGENT_NAME_MAX) {
		*why = "name is longer than 32 characters";
		return -EINVAL;
	}
	if (name[0] < 'a' || name[0] > 'z') {
		*why = "name must start with a lower-case letter (a-z)";
		return -EINVAL;
	}
	for (size_t i = 1; i < len; i++) {
		char c = name[i];
		if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')
			continue;
		*why = "name may contain only lower-case letters, digits and '-'";
		return -EINVAL;
	}
	return 0;
}

int snapshot_name_check(const char *name, const char **why)
{
	const char *dummy;
	size_t len;

	if (!why)
		why = &dummy;
	if (!name || !*name) {
		*why = "snapshot name is empty";
		return -EINVAL;
	}
	len = strlen(name);
	if (len > 64) {
		*why = "snapshot name is longer than 64 characters";
		return -EINVAL;
	}
	for (size_t i = 0; i < len; i++) {
		char c = name[i];
		bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			  (c >= '0' && c <= '9') || (i > 0 && (c == '-' || c == '_' || c == '.'));
		if (!ok) {
			*why = "snapshot name may contain only letters, digits, '-', '_' and '.', starting with a letter or digit";
			return -EINVAL;
		}
	}
	if (strstr(name, "..")) {
		*why = "snapshot name may not contain '..'";
		return -EINVAL;
	}
	return 0;
}

bool env_entry_valid(const char *entry)
{
	const char *eq = strchr(entry, '=');

	if (!eq || eq == entry || (*entry >= '0' && *entry <= '9'))
		return false;
	for (const char *p = entry; p < eq; p++)
		if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_'))
			return false;
	return true;
}

bool memory_key_valid(const char *key)
{
	size_t n = 0;

	if (!key || !*key || key[0] == '.')
		return false;
	for (const char *p = key; *p; p++, n++) {
		char c = *p;

		if (n >= MEMORY_KEY_MAX)
			return false;
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
		      c == '_' || c == '-'))
			return false;
	}
	return true;
}
