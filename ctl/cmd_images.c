/* fleetctl image and upgrade: the guest image store and moving an agent to the current image. */
#include <string.h>

#include "ctl/commands.h"

/* "a (disk, boot), b (boot)" from an image's used_by list; caller frees. */
static char *image_users_text(json_t *users)
{
	char *text = xstrdup("");
	const char *last = NULL;
	json_t *u;
	size_t i;

	json_array_foreach(users, i, u) {
		const char *agent = str(u, "agent");
		char *t = last && strcmp(last, agent) == 0 ? xasprintf("%.*s, %s)", (int)strlen(text) - 1, text, str(u, "as"))
			: xasprintf("%s%s%s (%s)", text, *text ? ", " : "", agent, str(u, "as"));
		free(text);
		text = t;
		last = agent;
	}
	return text;
}

int cmd_image(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	json_t *j = NULL, *images, *im;
	const char *sub;
	size_t i;
	int r;

	if ((r = parse_opts(cmd, argc, argv, help_only, no_opts, NULL)) != 0)
		return r < 0 ? EXIT_USAGE : 0;
	if (argc - optind < 1)
		return usage_error(cmd, "image needs ls or rm");
	sub = argv[optind];
	if (strcmp(sub, "rm") == 0) {
		if (argc - optind != 2)
			return usage_error(cmd, "image rm needs exactly one image ID");
		if (strspn(argv[optind + 1], "0123456789abcdefsha:") != strlen(argv[optind + 1]))
			return usage_error(cmd, "an image ID is hex digits, as 'fleetctl image ls' shows it");
		if (callf(ctl, "DELETE", NULL, &j, "/v1/images/%s", argv[optind + 1]))
			return 1;
		if (ctl->json)
			print_json(j);
		else
			printf("image sha256:%.12s removed\n", str(j, "removed"));
		json_decref(j);
		return 0;
	}
	if (strcmp(sub, "ls") != 0 || argc - optind != 1)
		return usage_error(cmd, "unknown image command '%s'", sub);
	if (call(ctl, "GET", "/v1/images", NULL, &j))
		return 1;
	images = json_object_get(j, "images");
	if (ctl->json) {
		print_json(j);
	} else if (json_array_size(images) == 0) {
		printf("no stored images (the image in %s is stored when an agent is created from it)\n",
		       str(j, "image_dir"));
	} else {
		printf("%-20s %-8s %-20s %-20s %-16s %8s  %s\n", "ID", "CURRENT", "IMPORTED", "BUILT", "KERNEL", "SIZE",
		       "USED BY");
		json_array_foreach(images, i, im) {
			_cleanup_free_ char *users = image_users_text(json_object_get(im, "used_by"));

			printf("sha256:%-13.12s %-8s %-20s %-20s %-16s %5lldMiB  %s\n", str(im, "id"),
			       json_is_true(json_object_get(im, "current")) ? "yes" : "", str(im, "imported_at"),
			       str(im, "built"), str(im, "kernel"), num(im, "size_bytes") >> 20, *users ? users : "-");
		}
		if (json_is_null(json_object_get(j, "current")))
			printf("the image in %s is not stored yet (it is when an agent is created or upgraded)\n",
			       str(j, "image_dir"));
	}
	json_decref(j);
	return 0;
}

int cmd_upgrade(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	json_t *j = NULL;
	const char *name;
	int status;

	if (!one_agent(cmd, argc, argv, help_only, no_opts, NULL, &name, &status))
		return status;
	if (callf(ctl, "POST", NULL, &j, "/v1/agents/%s/upgrade", name))
		return 1;
	if (ctl->json)
		print_json(j);
	else if (!json_is_true(json_object_get(j, "changed")))
		printf("agent '%s' boots image sha256:%.12s already\n", str(j, "agent"), str(j, "to"));
	else
		printf("agent '%s' boots image sha256:%.12s (was sha256:%.12s) from its next start%s\n", str(j, "agent"),
		       str(j, "to"), str(j, "from"),
		       json_is_true(json_object_get(j, "running")) ? ": 'fleetctl restart' it" : "");
	json_decref(j);
	return 0;
}
