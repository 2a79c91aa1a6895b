/*
 * vm/virt_xml.c: what fleet reads from libvirt's definitions comes from
 * libxml2's parse, so quoting, attribute order, spacing, comments and
 * look-alike text elsewhere in the document do not change it, and text
 * that is not XML is refused.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "vm/virt_xml.h"
#include "../tap.h"

static const char domain[] =
	"<domain type=\"kvm\" id='3'>\n"
	"  <name>fleet-a</name>\n"
	"  <description>&lt;domain type='qemu'&gt; &lt;kernel&gt;/x&lt;/kernel&gt;</description>\n"
	"  <os><type arch='x86_64'>hvm</type><kernel>/var/lib/fleet/images/i1/vmlinuz</kernel></os>\n"
	"  <devices>\n"
	"    <disk type='file' device='disk'><source\n        file='/var/lib/fleet/vms/a/disk.qcow2' index='2'/></disk>\n"
	"    <disk type='file' device='disk'><source index='1' file=\"/var/lib/fleet/vms/a/memory.img\"/></disk>\n"
	"    <!-- <interface><target dev='fleet-ghost'/></interface> -->\n"
	"    <interface type='bridge'><target dev='fl-a1b2c3'/></interface>\n"
	"  </devices>\n"
	"</domain>\n";

int main(void)
{
	char *s = NULL;

	ok(virt_xml_string(domain, "string(/domain/@type)", &s) == 0 && s && strcmp(s, "kvm") == 0,
	   "the domain's type, double-quoted (%s)", s ? s : "(null)");
	free(s);
	ok(virt_xml_string(domain, "string(/domain/os/kernel)", &s) == 0 && s &&
	   strcmp(s, "/var/lib/fleet/images/i1/vmlinuz") == 0, "the kernel is the <os> one, not escaped text in <description>");
	free(s);
	ok(virt_xml_string(domain, "string(/domain/os/initrd)", &s) == 0 && s == NULL, "an absent element: 0 and NULL");
	is_int(virt_xml_has(domain, "/domain/devices/disk/source/@file", "/var/lib/fleet/vms/a/disk.qcow2"), 1,
	       "a disk's source with a newline before the attribute");
	is_int(virt_xml_has(domain, "/domain/devices/disk/source/@file", "/var/lib/fleet/vms/a/memory.img"), 1,
	       "a disk's source, double-quoted, second attribute");
	is_int(virt_xml_has(domain, "/domain/devices/disk/source/@file", "/var/lib/fleet/vms/a/disk"), 0,
	       "a prefix of a source is not that source");
	is_int(virt_xml_has(domain, "/domain/devices/interface/target/@dev", "fleet-ghost"), 0,
	       "a tap named only in a comment is not the guest's");
	is_int(virt_xml_has(domain, "/domain/devices/interface/target/@dev", "fl-a1b2c3"), 1, "the guest's tap");
	is_int(virt_xml_has(domain, "/domain/devices/interface/target/@dev", "x' or '1'='1"), 0,
	       "a value with quotes is compared, never put into the expression");
	is_int(virt_xml_has("<domain type='kvm'>", "/domain/@type", "kvm"), -EINVAL, "not XML (unclosed): -EINVAL");
	is_int(virt_xml_string("<!DOCTYPE d [<!ENTITY e SYSTEM 'file:///etc/shadow'>]><d>&e;</d>", "string(/d)", &s), 0,
	       "an external entity is not loaded");
	ok(s == NULL, "and expands to nothing");
	free(s);
	is_int(virt_xml_string(domain, "string(/domain/@type", &s), -EINVAL, "a bad expression: -EINVAL");
	is_int(virt_xml_has(domain, "string(/domain/@type)", "kvm"), -EINVAL, "a string where a node set is wanted: -EINVAL");
	{
		/* one parse, several questions (vm_prepare_boot asks five) */
		struct virt_xml *x = virt_xml_parse(domain);

		ok(x != NULL, "a parsed document");
		ok(virt_xml_doc_string(x, "string(/domain/@type)", &s) == 0 && s && strcmp(s, "kvm") == 0,
		   "its type");
		free(s);
		is_int(virt_xml_doc_has(x, "/domain/devices/disk/source/@file", "/var/lib/fleet/vms/a/memory.img"), 1,
		       "and a disk of it, from the same parse");
		is_int(virt_xml_doc_has(x, "/domain/devices/interface/target/@dev", "fleet-ghost"), 0, "and not a commented tap");
		is_int(virt_xml_doc_string(x, "string(/domain/@type", &s), -EINVAL, "a bad expression on it: -EINVAL");
		virt_xml_free(x);
		ok(virt_xml_parse("<domain type='kvm'>") == NULL, "not XML: no document");
		is_int(virt_xml_doc_has(NULL, "/domain/@type", "kvm"), -EINVAL, "questions to no document: -EINVAL");
		is_int(virt_xml_doc_string(NULL, "string(/domain/@type)", &s), -EINVAL, "  both kinds");
		virt_xml_free(NULL);
	}
	{
		/* a snapshot's saved definitions against the domain's: what a restore in place needs */
		static const char snap[] =
			"<domainsnapshot><name>s1</name><state>running</state>\n"
			"  <domain type='qemu'>\n    <name>fleet-a</name>\n    <memory unit='KiB'>262144</memory>\n"
			"    <devices><disk type='file'><source file='/v/a/disk.qcow2'/></disk></devices>\n  </domain>\n"
			"  <inactiveDomain type='qemu'><name>fleet-a</name><memory unit='KiB'>524288</memory>"
			"<devices><disk type='file'><source file='/v/a/disk.qcow2'/></disk></devices></inactiveDomain>\n"
			"</domainsnapshot>\n";

		is_int(virt_xml_same_element(snap, "/domainsnapshot/domain",
					     "<domain id='7' type=\"qemu\"><name>fleet-a</name><memory unit=\"KiB\">262144</memory>"
					     "<devices>\n\n<disk type='file'><source file='/v/a/disk.qcow2'/></disk></devices></domain>",
					     "/domain"), 1,
		       "the same definition: other spacing and quoting, and an id (a run's number)");
		is_int(virt_xml_same_element(snap, "/domainsnapshot/inactiveDomain",
					     "<domain type='qemu'><name>fleet-a</name><memory unit='KiB'>524288</memory>"
					     "<devices><disk type='file'><source file='/v/a/disk.qcow2'/></disk></devices></domain>",
					     "/domain"), 1, "the persistent one, under another element name");
		is_int(virt_xml_same_element(snap, "/domainsnapshot/domain",
					     "<domain type='qemu'><name>fleet-a</name><memory unit='KiB'>524288</memory>"
					     "<devices><disk type='file'><source file='/v/a/disk.qcow2'/></disk></devices></domain>",
					     "/domain"), 0, "more memory: not the same");
		is_int(virt_xml_same_element(snap, "/domainsnapshot/domain",
					     "<domain type='qemu'><name>fleet-a</name><memory unit='KiB'>262144</memory>"
					     "<devices><disk type='file'><source file='/v/a/disk.qcow2'/></disk>"
					     "<interface type='network'/></devices></domain>", "/domain"), 0,
		       "a device more: not the same");
		is_int(virt_xml_same_element(snap, "/domainsnapshot/domain",
					     "<domain type='kvm'><name>fleet-a</name><memory unit='KiB'>262144</memory>"
					     "<devices><disk type='file'><source file='/v/a/disk.qcow2'/></disk></devices></domain>",
					     "/domain"), 0, "another attribute of the top element: not the same");
		is_int(virt_xml_same_element(snap, "/domainsnapshot/nothing", domain, "/domain"), -EINVAL,
		       "no such element: -EINVAL");
		is_int(virt_xml_same_element(snap, "/domainsnapshot/*", domain, "/domain"), -EINVAL,
		       "several elements: -EINVAL");
		is_int(virt_xml_same_element(snap, "/domainsnapshot/domain", "<domain>", "/domain"), -EINVAL,
		       "not XML: -EINVAL");
	}
	return tap_done();
}
