/* Agent and snapshot name rules: both ends rely on these. */
#include <errno.h>

#include "common/names.h"
#include "../tap.h"

int main(void)
{
	static const char *const good[] = { "a", "triage", "code-review", "bot-1", "z9",
		"abcdefghijklmnopqrstuvwxyz012345" /* 32 */ };
	static const char *const bad[] = { "", "A", "Triage", "1bot", "-bot", "bot_1", "bot.1", "bot/1",
		"../etc", "bot 1", "bot\n", "abcdefghijklmnopqrstuvwxyz0123456" /* 33 */, "é", "bot;rm" };
	const char *why;

	for (size_t i = 0; i < sizeof(good) / sizeof(*good); i++)
		ok(agent_name_check(good[i], &why) == 0, "agent name '%s' accepted", good[i]);
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		why = NULL;
		ok(agent_name_check(bad[i], &why) == -EINVAL && why && *why, "agent name '%s' refused: %s",
		   bad[i], why ? why : "?");
	}
	ok(agent_name_check(NULL, NULL) == -EINVAL, "NULL name refused");

	ok(snapshot_name_check("before-upgrade_2.1", NULL) == 0, "snapshot name with . _ - accepted");
	ok(snapshot_name_check("a..b", NULL) == -EINVAL, "snapshot name with .. refused");
	ok(snapshot_name_check(".hidden", NULL) == -EINVAL, "snapshot name starting with . refused");
	ok(snapshot_name_check("a/b", NULL) == -EINVAL, "snapshot name with / refused");

	{
		static const char *const good_env[] = { "A=1", "_x=", "LD_PRELOAD=/x.so", "path2=a=b" };
		static const char *const bad_env[] = { "A", "=1", "1A=x", "A-B=x", "A B=x", "A;B=x", "" };

		for (size_t i = 0; i < sizeof(good_env) / sizeof(*good_env); i++)
			ok(env_entry_valid(good_env[i]), "env entry '%s' accepted", good_env[i]);
		for (size_t i = 0; i < sizeof(bad_env) / sizeof(*bad_env); i++)
			ok(!env_entry_valid(bad_env[i]), "env entry '%s' refused", bad_env[i]);
	}
	return tap_done();
}
