/* snapshot_rehome: see snapshot_rehome.h. */
#include "vm/snapshot_rehome.h"

#include <errno.h>
#include <libxml/parser.h>
#include <libxml/tree.h>
#include <string.h>

#include "common/util.h"

#define XML_MAX (16 << 20)	/* libvirt's own limit on an RPC string is lower */

/* A document from libvirt's text: no network, no entity expansion, no DTD loaded. */
static xmlDocPtr parse(const char *text, const char *root, const char *what, char **why)
{
	size_t len = strlen(text);
	xmlDocPtr doc;
	xmlNodePtr r;

	if (len > XML_MAX) {
		*why = xasprintf("the %s is larger than %d bytes", what, XML_MAX);
		return NULL;
	}
	doc = xmlReadMemory(text, (int)len, NULL, NULL, XML_PARSE_NONET | XML_PARSE_NOBLANKS | XML_PARSE_NOERROR |
				      XML_PARSE_NOWARNING);
	if (!doc) {
		*why = xasprintf("the %s is not XML libxml2 can read", what);
		return NULL;
	}
	r = xmlDocGetRootElement(doc);
	if (!r || xmlStrcmp(r->name, (const xmlChar *)root) != 0) {
		*why = xasprintf("the %s is not a <%s>", what, root);
		xmlFreeDoc(doc);
		return NULL;
	}
	return doc;
}

int vm_snapshot_rehome(const char *snap_xml, const char *domain_xml, char **ret, char **why)
{
	xmlDocPtr snap = NULL, dom = NULL;
	xmlChar *out = NULL;
	int replaced = 0, len = 0, r = -EINVAL;

	if (!(snap = parse(snap_xml, "domainsnapshot", "snapshot definition", why)) ||
	    !(dom = parse(domain_xml, "domain", "domain definition", why)))
		goto out;
	for (xmlNodePtr n = xmlDocGetRootElement(snap)->children, next; n; n = next) {
		bool inactive;
		xmlNodePtr copy;

		next = n->next;
		if (n->type != XML_ELEMENT_NODE)
			continue;
		inactive = xmlStrcmp(n->name, (const xmlChar *)"inactiveDomain") == 0;
		if (!inactive && xmlStrcmp(n->name, (const xmlChar *)"domain") != 0)
			continue;
		if (!(copy = xmlDocCopyNode(xmlDocGetRootElement(dom), snap, 1))) {
			r = -ENOMEM;
			goto out;
		}
		if (inactive)
			xmlNodeSetName(copy, (const xmlChar *)"inactiveDomain");
		xmlReplaceNode(n, copy);
		xmlFreeNode(n);
		replaced++;
	}
	if (!replaced) {
		/* libvirt refuses to revert to a snapshot without one: nothing to carry over. */
		*why = xstrdup("the snapshot definition embeds no <domain>");
		goto out;
	}
	xmlDocDumpMemory(snap, &out, &len);
	if (!out || len <= 0) {
		r = -ENOMEM;
		goto out;
	}
	*ret = xstrdup((const char *)out);
	r = 0;
out:
	xmlFree(out);
	xmlFreeDoc(dom);
	xmlFreeDoc(snap);
	return r;
}
