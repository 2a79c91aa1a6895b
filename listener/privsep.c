/* privsep: see privsep.h. */
#include "listener/privsep.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <jansson.h>
#include <linux/capability.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <pwd.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"

#define FAIL(...) do { log_error(__VA_ARGS__); return -1; } while (0)

/*
 * Load what the verifiers use from libcrypto while its files can still be
 * read: the configuration, the HMAC implementation and the digests. After
 * chroot there is no /usr/lib/ssl to find them in.
 */
static int crypto_warm_up(void)
{
	static const unsigned char key[16], data[1];
	unsigned char out[EVP_MAX_MD_SIZE];
	unsigned int n = 0;

	if (OPENSSL_init_crypto(OPENSSL_INIT_LOAD_CONFIG, NULL) != 1)
		return -1;
	if (!EVP_Q_mac(NULL, "HMAC", NULL, "SHA256", NULL, key, sizeof(key), data, sizeof(data), out, sizeof(out), NULL) ||
	    !EVP_Q_mac(NULL, "HMAC", NULL, "SHA1", NULL, key, sizeof(key), data, sizeof(data), out, sizeof(out), NULL) ||
	    EVP_Digest(data, sizeof(data), out, &n, EVP_sha256(), NULL) != 1)
		return -1;
	OPENSSL_cleanse(out, sizeof(out));
	return 0;
}

/* root: a directory (not a symlink) owned by root, writable by nobody, empty. */
static int root_check(const char *root)
{
	int fd = open(root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;
	DIR *d;
	struct dirent *e;
	int entries = 0;

	if (fd < 0)
		FAIL("privsep: cannot open the root directory %s: %s", root, strerror(errno));
	if (fstat(fd, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != 0 || (st.st_mode & 0222)) {
		close(fd);
		FAIL("privsep: %s must be a directory owned by root that nobody may write (mode 0555)", root);
	}
	if (!(d = fdopendir(fd))) {
		close(fd);
		FAIL("privsep: cannot read %s: %s", root, strerror(errno));
	}
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
			entries++;
	closedir(d);
	if (entries)
		FAIL("privsep: the root directory %s is not empty", root);
	return 0;
}

/* No capability in any set of this process. */
static int caps_none(void)
{
	struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3, .pid = 0 };
	struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];

	memset(data, 0xff, sizeof(data));
	if (syscall(SYS_capget, &hdr, data) < 0)
		FAIL("privsep: capget: %s", strerror(errno));
	for (int i = 0; i < _LINUX_CAPABILITY_U32S_3; i++)
		if (data[i].effective || data[i].permitted || data[i].inheritable)
			FAIL("privsep: capabilities remain after dropping to the user (effective %#x, permitted %#x)",
			     data[i].effective, data[i].permitted);
	return 0;
}

static int limit(int resource, const char *name, rlim_t max)
{
	struct rlimit rl;

	if (getrlimit(resource, &rl) < 0)
		FAIL("privsep: getrlimit %s: %s", name, strerror(errno));
	if (rl.rlim_max == RLIM_INFINITY || rl.rlim_max > max)
		rl.rlim_max = max;
	rl.rlim_cur = rl.rlim_max;
	if (setrlimit(resource, &rl) < 0)
		FAIL("privsep: setrlimit %s: %s", name, strerror(errno));
	return 0;
}

int privsep_drop(const char *user, const char *root)
{
	struct passwd *pw;
	uid_t uid, ru, eu, su;
	gid_t gid, rg, eg, sg;

	if (geteuid() != 0)
		FAIL("privsep: fleet-hooksd must be started as root (by fleetd) to drop its privileges");
	if (crypto_warm_up() < 0)
		FAIL("privsep: cannot initialise libcrypto's HMAC and digests");
	/* jansson's hash seed from /dev/urandom, while it exists: bodies are hostile JSON (hash flooding). */
	json_object_seed(0);
	tzset();
	errno = 0;
	if (!(pw = getpwnam(user)))
		FAIL("privsep: no such user '%s'%s%s", user, errno ? ": " : "", errno ? strerror(errno) : "");
	uid = pw->pw_uid;
	gid = pw->pw_gid;
	if (uid == 0 || gid == 0)
		FAIL("privsep: the user '%s' is root or in group root; it must be an unprivileged user", user);
	endpwent();
	if (root_check(root) < 0)
		return -1;
	if (chroot(root) < 0)
		FAIL("privsep: chroot %s: %s", root, strerror(errno));
	if (chdir("/") < 0)
		FAIL("privsep: chdir / in %s: %s", root, strerror(errno));
	/* While still root: empty the bounding set and the ambient set, so nothing can come back. */
	for (int cap = 0; cap <= 63; cap++)
		if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL)
			FAIL("privsep: cannot drop capability %d from the bounding set: %s", cap, strerror(errno));
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
		FAIL("privsep: cannot clear the ambient capabilities: %s", strerror(errno));
	if (setgroups(0, NULL) < 0)
		FAIL("privsep: setgroups: %s", strerror(errno));
	if (setresgid(gid, gid, gid) < 0)
		FAIL("privsep: setresgid %ld: %s", (long)gid, strerror(errno));
	if (setresuid(uid, uid, uid) < 0)
		FAIL("privsep: setresuid %ld: %s", (long)uid, strerror(errno));
	if (getresuid(&ru, &eu, &su) < 0 || ru != uid || eu != uid || su != uid ||
	    getresgid(&rg, &eg, &sg) < 0 || rg != gid || eg != gid || sg != gid || getgroups(0, NULL) != 0)
		FAIL("privsep: the user and group ids did not all change to %ld:%ld", (long)uid, (long)gid);
	if (setuid(0) == 0)
		FAIL("privsep: root could be regained after the drop");
	if (caps_none() < 0)
		return -1;
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		FAIL("privsep: PR_SET_NO_NEW_PRIVS: %s", strerror(errno));
	/* No file may be written: a write to one fails (EFBIG) rather than killing us (stderr is fleetd's pipe). */
	signal(SIGXFSZ, SIG_IGN);
	if (limit(RLIMIT_CORE, "RLIMIT_CORE", 0) < 0 || limit(RLIMIT_FSIZE, "RLIMIT_FSIZE", 0) < 0 ||
	    limit(RLIMIT_NPROC, "RLIMIT_NPROC", 0) < 0 || limit(RLIMIT_NOFILE, "RLIMIT_NOFILE", PRIVSEP_NOFILE_MAX) < 0)
		return -1;
#if defined(__SANITIZE_ADDRESS__)
	/* AddressSanitizer has reserved terabytes of shadow memory already: no address space limit fits it. */
	log_notice("privsep: built with AddressSanitizer: no RLIMIT_AS");
#else
	if (limit(RLIMIT_AS, "RLIMIT_AS", PRIVSEP_AS_MAX) < 0)
		return -1;
#endif
	return 0;
}
