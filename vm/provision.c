/*
 * provision: making and removing an agent's guest: its keys (fleetd's login
 * key, the guest's host key and pinned fingerprint), its qcow2 overlay on
 * its image's base, the seed disk that carries the keys in, the domain and
 * NAT network definitions; and, before each boot, keeping its directory
 * root's so nothing of QEMU's can be a link there.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/firewall.h"
#include "model/fleetd.h"
#include "vm/images.h"
#include "common/log.h"
#include "backend/spawn.h"
#include "vm/ssh.h"
#include "common/util.h"
#include "vm/virt.h"
#include "vm/vm_internal.h"

/* The seed disk: the guest copies these into place at every boot (see images/README.md). */
static int make_seed(struct vm_backend *b, const struct agent *a, const char *client_pub, char **why)
{
	_cleanup_free_ char *stage = vm_key_path(b, a->name, "seed");
	_cleanup_free_ char *host = vm_key_path(b, a->name, "host");
	_cleanup_free_ char *seed = vm_path(b, a->name, "seed.img");
	_cleanup_free_ char *tmp = xasprintf("%s.tmp", seed);
	_cleanup_free_ char *f_host = xasprintf("%s/dropbear_ed25519_host_key", stage);
	_cleanup_free_ char *f_root = xasprintf("%s/authorized_keys_root", stage);
	_cleanup_free_ char *f_agent = xasprintf("%s/authorized_keys_agent", stage);
	_cleanup_free_ char *f_name = xasprintf("%s/hostname", stage);
	_cleanup_free_ char *line = xasprintf("%s\n", client_pub);
	_cleanup_free_ char *hostname = xasprintf("%s\n", a->name);
	const char *cp[] = { "cp", "--", host, f_host, NULL };
	const char *mk[] = { "mke2fs", "-q", "-F", "-t", "ext2", "-L", "fleet-seed", "-m", "0", "-E", "root_owner=0:0",
			     "-d", stage, tmp, "2M", NULL };
	const char *rm[] = { "rm", "-rf", "--", stage, NULL };
	int r;

	if (mkdir(stage, 0700) < 0 && errno != EEXIST)
		return -errno;
	if ((r = vm_run_tool(cp, "copying the host key", why)) < 0 ||
	    (r = vm_write_text(f_root, line, 0600)) < 0 || (r = vm_write_text(f_agent, line, 0600)) < 0 ||
	    (r = vm_write_text(f_name, hostname, 0644)) < 0 || (r = vm_run_tool(mk, "mke2fs for the seed disk", why)) < 0) {
		if (r < 0 && !*why)
			*why = xasprintf("cannot write the seed disk: %s", strerror(-r));
		(void)spawn_run(rm, NULL);
		unlink(tmp);
		return r;
	}
	(void)spawn_run(rm, NULL);
	if (rename(tmp, seed) < 0)
		return -errno;
	return 0;
}

bool vm_agent_remote(const struct agent *a)
{
	return a->host && strcmp(a->host, HOST_LOCAL) != 0;
}

void vm_domain_files_clear(struct vm_domain_files *f)
{
	free(f->kernel);
	free(f->initrd);
	free(f->disk);
	free(f->backing);
	free(f->seed);
	free(f->memdisk);
	free(f->console);
	free(f->channel);
	*f = (struct vm_domain_files){ 0 };	/* domain_type is static */
}

/*
 * The domain definition of a local agent; uuid (or NULL for a new domain)
 * keeps a redefinition the same domain. The kernel and initramfs are those
 * of the agent's boot image; the disk's backing chain is pinned to its
 * image's base.qcow2, so libvirt never probes it from the qcow2 header (an
 * agent from before the image store, not yet moved to it, keeps image_dir's
 * files).
 */
char *vm_domain_xml(struct vm_backend *b, const struct agent *a, const struct agent_images *im, const char *uuid)
{
	struct vm_domain_files files = {
		.disk = vm_path(b, a->name, "disk.qcow2"), .seed = vm_path(b, a->name, "seed.img"),
		.memdisk = vm_path(b, a->name, MEMDISK), .console = vm_path(b, a->name, "console.log"),
		.channel = vm_path(b, a->name, "ctl.sock"),
	};
	char *xml;

	if (im->boot_image) {
		files.kernel = image_store_path(b->state_dir, im->boot_image, "vmlinuz");
		files.initrd = image_store_path(b->state_dir, im->boot_image, "initramfs.img");
	} else {
		files.kernel = vm_image_path(b, "vmlinuz");
		files.initrd = vm_image_path(b, "initramfs.img");
	}
	if (im->image)
		files.backing = image_store_path(b->state_dir, im->image, "base.qcow2");
	xml = vm_domain_xml_files(b, a, &files, uuid);
	vm_domain_files_clear(&files);
	return xml;
}

char *vm_domain_xml_files(struct vm_backend *b, const struct agent *a, const struct vm_domain_files *files,
			  const char *uuid)
{
	_cleanup_free_ char *dom = vm_domain_name(a->name);
	_cleanup_free_ char *backing = NULL, *memdisk = NULL, *console = NULL, *channel = NULL;
	_cleanup_free_ char *nic = NULL, *uuid_el = uuid ? xasprintf("  <uuid>%s</uuid>\n", uuid) : NULL;

	if (files->backing)
		backing = xasprintf("      <backingStore type='file'>\n"
				    "        <format type='qcow2'/>\n"
				    "        <source file='%s'/>\n"
				    "        <backingStore/>\n"
				    "      </backingStore>\n", files->backing);
	/* The memory store (memdisk.c): qcow2, so the internal snapshots hold it too. */
	if (files->memdisk)
		memdisk = xasprintf("    <disk type='file' device='disk'>\n"
				    "      <driver name='qemu' type='qcow2'/>\n"
				    "      <source file='%s'/>\n"
				    "      <target dev='vdc' bus='virtio'/>\n"
				    "    </disk>\n", files->memdisk);
	if (files->console)
		console = xasprintf("    <serial type='file'>\n"
				    "      <source path='%s' append='on'/>\n"
				    "      <target port='0'/>\n"
				    "    </serial>\n"
				    "    <console type='file'>\n"
				    "      <source path='%s' append='on'/>\n"
				    "      <target type='serial' port='0'/>\n"
				    "    </console>\n", files->console, files->console);
	else
		console = xstrdup("    <serial type='pty'>\n"
				  "      <target port='0'/>\n"
				  "    </serial>\n"
				  "    <console type='pty'>\n"
				  "      <target type='serial' port='0'/>\n"
				  "    </console>\n");
	/* Without a path libvirt makes the socket on the guest's host (virDomainOpenChannel reaches it). */
	channel = files->channel ? xasprintf("      <source mode='bind' path='%s'/>\n", files->channel)
				 : xstrdup("      <source mode='bind'/>\n");
	if (a->network == NETWORK_NAT) {
		char tap[FIREWALL_TAP_SIZE];
		_cleanup_free_ char *filter = files->remote_nat ? vm_remote_nat_filter(a->name) : NULL;
		_cleanup_free_ char *filterref = filter ? xasprintf("      <filterref filter='%s'/>\n", filter) : NULL;

		/*
		 * A tap named by fleet: its egress rules match it (backend/firewall.h);
		 * on another host its network filter there holds them (remote_nat.c).
		 */
		firewall_vm_tap(a->name, tap);
		nic = xasprintf("    <interface type='network'>\n"
				"      <source network='%s'/>\n"
				"      <target dev='%s'/>\n"
				"      <model type='virtio'/>\n"
				"%s"
				"      <port isolated='yes'/>\n"
				"    </interface>\n", files->remote_nat ? REMOTE_NAT_NETWORK : NETWORK_NAME, tap,
				filterref ? filterref : "");
	}
	/* Agent names are [a-z][a-z0-9-]*, paths are ours or libvirt's volumes ([A-Za-z0-9/._-]): no escaping needed. */
	return xasprintf(
		"<domain type='%s'>\n"
		"  <name>%s</name>\n"
		"%s"
		"  <title>fleet agent %s</title>\n"
		"  <metadata>\n"
		"    <fleet:agent xmlns:fleet='https://fleet.invalid/xmlns/agent/1'>\n"
		"      <fleet:name>%s</fleet:name>\n"
		"      <fleet:owner>fleetd</fleet:owner>\n"
		"    </fleet:agent>\n"
		"  </metadata>\n"
		"  <memory unit='MiB'>%d</memory>\n"
		"  <vcpu>%d</vcpu>\n"
		"  <os>\n"
		"    <type arch='x86_64' machine='pc'>hvm</type>\n"
		"    <kernel>%s</kernel>\n"
		"    <initrd>%s</initrd>\n"
		"    <cmdline>console=ttyS0 root=/dev/vda rw</cmdline>\n"
		"  </os>\n"
		"  <features><acpi/></features>\n"
		"  <on_poweroff>destroy</on_poweroff>\n"
		"  <on_reboot>restart</on_reboot>\n"
		"  <on_crash>destroy</on_crash>\n"
		"  <devices>\n"
		"    <disk type='file' device='disk'>\n"
		"      <driver name='qemu' type='qcow2'/>\n"
		"      <source file='%s'/>\n"
		"%s"
		"      <target dev='vda' bus='virtio'/>\n"
		"    </disk>\n"
		"    <disk type='file' device='disk'>\n"
		"      <driver name='qemu' type='raw'/>\n"
		"      <source file='%s'/>\n"
		"      <target dev='vdb' bus='virtio'/>\n"
		"      <readonly/>\n"
		"    </disk>\n"
		"%s"
		"%s"
		"    <channel type='unix'>\n"
		"%s"
		"      <target type='virtio' name='" CHANNEL_NAME "'/>\n"
		"    </channel>\n"
		"%s"
		"    <memballoon model='none'/>\n"
		"  </devices>\n"
		"</domain>\n",
		files->domain_type ? files->domain_type : b->domain_type, dom, uuid_el ? uuid_el : "", a->name, a->name, a->memory_mib, a->vcpus, files->kernel,
		files->initrd, files->disk, backing ? backing : "", files->seed, memdisk ? memdisk : "", console, channel,
		nic ? nic : "");
}

char *vm_network_xml(void)
{
	/* Guests reach the outside through NAT but never each other (isolated ports). */
	return xasprintf("<network>\n"
			 "  <name>" NETWORK_NAME "</name>\n"
			 "  <forward mode='nat'/>\n"
			 "  <bridge name='fleetbr0' stp='off'/>\n"
			 "  <port isolated='yes'/>\n"
			 "  <ip address='" FIREWALL_VM_GATEWAY "' netmask='255.255.255.0'>\n"
			 "    <dhcp><range start='192.168.223.10' end='192.168.223.250'/></dhcp>\n"
			 "  </ip>\n"
			 "</network>\n");
}

/*
 * What a create on another host does there, at length (the image uploaded
 * once per host, 31 MB; the overlay made; the seed and the memory disk
 * uploaded; the domain defined): on a worker thread for provision_start,
 * so fleetd's loop serves every other request meanwhile, or in the call
 * for provision. It touches only the job: its own copy of the agent, and
 * the host's connection (libvirt's connections are thread-safe).
 */
struct remote_job {
	struct vm_backend *b;
	struct virt *virt;
	struct vm *vm;			/* busy while the worker runs; NULL in the call */
	struct agent *agent;		/* a copy */
	char id[IMAGE_ID_LEN + 1];	/* its image */
	long long t0;
	int r;
	char *why;
	backend_done_fn done;
	void *userdata;
};

/* Its disks there, then the domain naming them; what reached the host goes again on failure. -errno with *why. */
static int remote_make(struct remote_job *j, char **why)
{
	const struct agent *a = j->agent;
	_cleanup_free_ char *seed = vm_path(j->b, a->name, "seed.img");
	_cleanup_free_ char *memdisk = vm_path(j->b, a->name, MEMDISK), *xml = NULL;
	struct vm_domain_files files;
	int r;

	/* Its memory disk is made here as for a local agent (mke2fs, qemu-img convert), then uploaded. */
	if ((r = vm_memdisk_build(memdisk, vm_memdisk_mib(a->memory_quota_mib), why)) < 0)
		return r;
	r = vm_remote_disks_make(j->b, j->virt, a, j->id, seed, memdisk, why);
	(void)unlink(memdisk);	/* its copy is the volume there, as for an agent moved there */
	if (r < 0)
		return r;
	/* A NAT guest's network there and its filter, before a domain names them. */
	if (a->network == NETWORK_NAT && (r = vm_remote_nat_apply(j->virt, a->name, a->egress_allow, why)) < 0)
		goto fail;
	if ((r = vm_remote_files(j->b, j->virt, a, j->id, &files, why)) < 0)
		goto fail;
	xml = vm_domain_xml_files(j->b, a, &files, NULL);
	vm_domain_files_clear(&files);
	if ((r = virt_domain_define(j->virt, xml, why)) < 0)
		goto fail;
	return 0;
fail:
	vm_remote_disks_remove(j->virt, a->name);
	if (a->network == NETWORK_NAT)
		vm_remote_nat_remove(j->virt, a->name);
	return r;
}

static void remote_work(void *arg)
{
	struct remote_job *j = arg;

	j->r = remote_make(j, &j->why);
}

/* On the loop: a failed job's files here removed, the outcome logged; j freed. j->r, *why (caller frees) on failure. */
static int remote_finish(struct remote_job *j, char **why)
{
	const struct agent *a = j->agent;
	int r = j->r;

	if (r < 0) {
		_cleanup_free_ char *dir = vm_path(j->b, a->name, NULL), *keys = vm_key_path(j->b, a->name, NULL);

		/* Nothing half-created: its volumes there went on the worker, its keys and seed go here. */
		vm_remove_tree(dir);
		vm_remove_tree(keys);
		*why = j->why ? j->why : xstrdup(strerror(-r));
		j->why = NULL;
	} else {
		_cleanup_free_ char *dom = vm_domain_name(a->name);

		log_info("agent '%s': provisioned domain %s on host %s in %.1f s (%d MiB, %d vcpus, %d GiB disk, "
			 "%d MiB memory disk, image sha256:%.12s)", a->name, dom, a->host, (now_usec() - j->t0) / 1e6,
			 a->memory_mib, a->vcpus, a->disk_gib, vm_memdisk_mib(a->memory_quota_mib), j->id);
	}
	agent_free(j->agent);
	free(j->why);
	free(j);
	return r;
}

static void remote_done(void *arg)
{
	struct remote_job *j = arg;
	backend_done_fn done = j->done;
	void *userdata = j->userdata;
	_cleanup_free_ char *why = NULL;
	int r;

	j->vm->busy = false;
	if (j->r == 0)	/* made at its quota's size: its first start has nothing to grow */
		j->vm->memdisk_mib = vm_memdisk_mib(j->agent->memory_quota_mib);
	r = remote_finish(j, &why);
	done(userdata, r, why);
}

/*
 * The part on fleetd's host (checks, keys, seed; for a local agent all of
 * it): 0 made, 1 an agent on another host whose disks and domain are still
 * to make there (*ret: the job), -errno with *why (nothing left).
 */
static int provision_here(struct fleetd *f, const struct agent *a, struct remote_job **ret, char **why)
{
	struct vm_backend *b = vm_backend_of(f);
	_cleanup_free_ char *dom = vm_domain_name(a->name);
	_cleanup_free_ char *dir = vm_path(b, a->name, NULL), *keys = vm_key_path(b, a->name, NULL);
	_cleanup_free_ char *client = vm_key_path(b, a->name, "client"), *host = vm_key_path(b, a->name, "host");
	_cleanup_free_ char *fp_file = vm_key_path(b, a->name, "host.fingerprint");
	_cleanup_free_ char *disk = vm_path(b, a->name, "disk.qcow2"), *base = NULL;
	_cleanup_free_ char *seed = vm_path(b, a->name, "seed.img");
	_cleanup_free_ char *size = xasprintf("%dG", a->disk_gib);
	_cleanup_free_ char *client_pub = NULL, *host_fp = NULL, *fp_line = NULL, *xml = NULL;
	char id[IMAGE_ID_LEN + 1];
	struct agent_images im = { .image = id, .boot_image = id };
	enum virt_state st;
	int r;

	struct virt *virt = vm_agent_virt(b, a, why);
	bool remote = vm_agent_remote(a);

	if (!virt)
		return -ENOTCONN;
	/* Its own copy of the image as built: a later rebuild in image_dir leaves this agent alone. */
	if ((r = image_import(b->state_dir, b->image_dir, id, why)) < 0)
		return r;
	base = image_store_path(b->state_dir, id, "base.qcow2");
	const char *img[] = { "qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", base, disk, size, NULL };
	if ((r = virt_connect(virt, why)) < 0) {
		char *inner = *why;
		*why = xasprintf("cannot reach libvirt (is libvirtd running?): %s", inner ? inner : "");
		free(inner);
		return -EHOSTDOWN;
	}
	if (virt_domain_state(virt, dom, &st) == 0) {
		*why = xasprintf("a libvirt domain named %s already exists; fleet will not take it over", dom);
		return -EEXIST;
	}
	if (access(dir, F_OK) == 0 || access(keys, F_OK) == 0) {
		*why = xasprintf("%s or %s already exists (left by an earlier fleetd?); remove it first", dir, keys);
		return -EEXIST;
	}
	/*
	 * chmod too: under fleetd's umask 0077 mkdir alone would leave QEMU
	 * outside. dir stays root's: QEMU only opens files libvirt names, and
	 * libvirtd (root) creates the control socket and virtlogd (root) the
	 * console log there, so no symlink or FIFO of QEMU's can wait where
	 * fleetd reads.
	 */
	if ((r = mkdir_p(dir, 0711)) < 0 || (r = mkdir_p(keys, 0700)) < 0 ||
	    (chmod(dir, 0711) < 0 && (r = -errno)) || (chmod(keys, 0700) < 0 && (r = -errno))) {
		*why = xasprintf("cannot create %s: %s", dir, strerror(-r));
		goto fail;
	}
	if ((r = ssh_keygen(client, SSH_KEY_OPENSSH, "fleetd", &client_pub, NULL)) < 0 ||
	    (r = ssh_keygen(host, SSH_KEY_DROPBEAR, a->name, NULL, &host_fp)) < 0) {
		*why = xasprintf("cannot generate SSH keys: %s", strerror(-r));
		goto fail;
	}
	fp_line = xasprintf("%s\n", host_fp);
	if ((r = vm_write_text(fp_file, fp_line, 0600)) < 0) {
		*why = xasprintf("cannot write %s: %s", fp_file, strerror(-r));
		goto fail;
	}
	if (remote) {
		/* Its disks are volumes in that host's pool: the seed is made here, the rest by the job. */
		struct remote_job *j;

		if ((r = make_seed(b, a, client_pub, why)) < 0 || (chmod(seed, 0600) < 0 && (r = -errno)))
			goto fail;
		if ((r = b->host->set_images(f, a->name, &im)) < 0) {
			*why = xasprintf("cannot record its image: %s", strerror(-r));
			goto fail;
		}
		j = xcalloc(1, sizeof(*j));
		j->b = b;
		j->virt = virt;
		j->agent = agent_copy(a);
		memcpy(j->id, id, sizeof(j->id));
		j->t0 = now_usec();
		*ret = j;
		return 1;
	}
	if ((r = vm_run_tool(img, "qemu-img create", why)) < 0 || (r = make_seed(b, a, client_pub, why)) < 0)
		goto fail;
	/* Not left to the tools' modes: the disk holds the agent's files, the seed its host key. */
	if ((chmod(disk, 0600) < 0 || chmod(seed, 0600) < 0) && (r = -errno)) {
		*why = xasprintf("cannot chmod the disks in %s: %s", dir, strerror(-r));
		goto fail;
	}
	if (a->network == NETWORK_NAT) {
		_cleanup_free_ char *net = vm_network_xml();
		if ((r = virt_network_ensure(virt, NETWORK_NAME, net, why)) < 0)
			goto fail;
	}
	if ((r = b->host->set_images(f, a->name, &im)) < 0) {
		*why = xasprintf("cannot record its image: %s", strerror(-r));
		goto fail;
	}
	xml = vm_domain_xml(b, a, &im, NULL);
	if ((r = virt_domain_define(virt, xml, why)) < 0)
		goto fail;
	log_info("agent '%s': provisioned domain %s (%s, %d MiB, %d vcpus, %d GiB disk, network %s, image sha256:%.12s)",
		 a->name, dom, b->domain_type, a->memory_mib, a->vcpus, a->disk_gib, network_kind_to_string(a->network),
		 id);
	return 0;
fail:
	/* Nothing half-created: no orphan overlay, keys or domain. */
	vm_remove_tree(dir);
	vm_remove_tree(keys);
	return r < 0 ? r : -EIO;
}

int vm_provision(struct fleetd *f, const struct agent *a, char **why)
{
	struct remote_job *j = NULL;
	int r = provision_here(f, a, &j, why);

	if (r <= 0)
		return r;
	/* All of it in the call (restoring a backup at fleetd's start, before the loop serves). */
	remote_work(j);
	return remote_finish(j, why);
}

int vm_provision_start(struct fleetd *f, const struct agent *a, backend_done_fn done, void *userdata, char **why)
{
	struct remote_job *j = NULL;
	int r = provision_here(f, a, &j, why);

	if (r <= 0)
		return r;
	j->done = done;
	j->userdata = userdata;
	/* busy: no remove (nor anything else) of it while its disks are made there. */
	j->vm = vm_get(j->b, a->name);
	j->vm->busy = true;
	if ((r = vm_worker_run(j->b, remote_work, remote_done, j)) < 0) {
		j->vm->busy = false;
		j->r = r;
		j->why = xasprintf("cannot start a worker thread: %s", strerror(-r));
		return remote_finish(j, why);
	}
	log_info("agent '%s': making its disks and domain on host %s (off the loop)", a->name, a->host);
	return 1;
}

int vm_destroy(struct fleetd *f, const struct agent *a, bool force, char **why)
{
	struct vm_backend *b = vm_backend_of(f);
	_cleanup_free_ char *dom = vm_domain_name(a->name);
	_cleanup_free_ char *dir = vm_path(b, a->name, NULL), *keys = vm_key_path(b, a->name, NULL);
	struct vm *v = vm_find(b, a->name);
	struct virt *virt = vm_agent_virt(b, a, why);
	enum virt_state st;
	int r;

	if (!virt)
		return -ENOTCONN;
	if (v && v->busy) {
		*why = xstrdup("a snapshot, restore, move or its create is under way; try again when it is done");
		return -EBUSY;
	}
	r = virt_domain_state(virt, dom, &st);
	if (r == 0 && st != VIRT_OFF) {
		if (!force) {
			*why = xasprintf("domain %s is %s; stop it first or use --force", dom, virt_state_to_string(st));
			return -EBUSY;
		}
		if (v)
			v->stopping = true;
		if ((r = virt_domain_destroy(virt, dom, why)) < 0 && r != -EINVAL)
			return r;
	}
	if (r == 0 || r == -EINVAL) {
		if ((r = virt_domain_undefine(virt, dom, why)) < 0 && r != -ENOENT)
			return r;
	} else if (r != -ENOENT) {
		*why = xasprintf("cannot reach libvirt to remove domain %s", dom);
		return r;
	}
	if (v)
		vm_free(v);
	/* A move of it cut short and not cleaned yet (its target unreachable then): that copy goes too. */
	(void)vm_move_recover_one(b, a->name);
	if (vm_agent_remote(a))
		vm_remote_disks_remove(virt, a->name);
	vm_remove_tree(dir);
	vm_remove_tree(keys);
	if (a->network == NETWORK_NAT && vm_agent_remote(a)) {
		/* Its rules were its filter there; the network stays for the host's other agents. */
		vm_remote_nat_remove(virt, a->name);
	} else if (a->network == NETWORK_NAT) {
		_cleanup_free_ char *fwhy = NULL;

		/* The guest is gone: a leftover chain would only wait for a tap of the same name. */
		if (firewall_vm_agent_remove(a->name, &fwhy) < 0)
			log_warning("agent '%s': cannot remove its egress rules: %s", a->name, fwhy ? fwhy : "?");
	}
	log_info("agent '%s': removed domain %s, its disk and its keys", a->name, dom);
	return 0;
}

/*
 * Before a boot: the agent's dir is root's and 0711 (an older fleetd gave
 * it to QEMU's user), and the disks are 0600, so virtlogd (root, follows
 * symlinks) and fleetd never meet a link of QEMU's there. -errno with *why.
 */
int vm_dir_secure(struct vm_backend *b, const char *agent, char **why)
{
	_cleanup_close_ int dfd = vm_dir_open(b, agent);
	static const char *const disks[] = { "disk.qcow2", "seed.img", MEMDISK };
	struct stat st;
	uid_t was;

	if (dfd < 0 || fstat(dfd, &st) < 0) {
		int r = dfd < 0 ? dfd : -errno;
		*why = xasprintf("cannot open the agent's directory: %s", strerror(-r));
		return r;
	}
	/* virtlogd (root) appends to console.log and would follow a link there. */
	if (fstatat(dfd, CONSOLE_LOG, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(st.st_mode) &&
	    unlinkat(dfd, CONSOLE_LOG, 0) == 0)
		log_warning("agent '%s': removed a %s that was not a regular file", agent, CONSOLE_LOG);
	if (fstat(dfd, &st) < 0) {
		int r = -errno;
		*why = xasprintf("cannot stat the agent's directory: %s", strerror(-r));
		return r;
	}
	if (st.st_uid == geteuid() && (st.st_mode & 07777) == 0711)
		return 0;
	was = st.st_uid;
	if (fchown(dfd, geteuid(), getegid()) < 0 || fchmod(dfd, 0711) < 0) {
		int r = -errno;
		*why = xasprintf("cannot make the agent's directory root's: %s", strerror(-r));
		return r;
	}
	/* Disks an older fleetd left 0644: the agent's files and its host key. */
	for (size_t i = 0; i < ARRAY_SIZE(disks); i++) {
		if (fstatat(dfd, disks[i], &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
			(void)fchmodat(dfd, disks[i], 0600, 0);
	}
	log_notice("agent '%s': its directory is root's now (was uid %u)", agent, (unsigned)was);
	return 0;
}
