/* source: the names of webhook sources (verify.h), as routes store them and fleetctl takes them. */
#include "hooks/verify.h"

#include "model/name_table.h"

static const char *const source_names[HOOK_SOURCE__COUNT] = {
	[HOOK_GITHUB] = "github", [HOOK_SLACK] = "slack",       [HOOK_TWILIO] = "twilio",
	[HOOK_DATADOG] = "datadog", [HOOK_STANDARD] = "standard", [HOOK_HMAC] = "hmac",
};

const char *hook_source_to_string(enum hook_source s)
{
	return name_table_word(source_names, HOOK_SOURCE__COUNT, (int)s);
}

int hook_source_from_string(const char *s)
{
	return name_table_value(source_names, HOOK_SOURCE__COUNT, s);
}
