/* virt_xml: see virt_xml.h. */
#include "vm/virt_xml.h"

#include <errno.h>
#include <libxml/parser.h>
#include <libxml/xpath.h>
#include <string.h>

#include "common/util.h"

#define XML_MAX (16 << 20)	/* libvirt's own limit on an RPC string is lower */

struct virt_xml {
	xmlDocPtr doc;
	xmlXPathContextPtr ctx;
};

static struct virt_xml *parse(const char *xml, int flags)
{
	size_t len = strlen(xml);
	struct virt_xml *x;
	xmlDocPtr doc = len <= XML_MAX ? xmlReadMemory(xml, (int)len, NULL, NULL, XML_PARSE_NONET | XML_PARSE_NOERROR |
						       XML_PARSE_NOWARNING | flags) : NULL;

	if (!doc)
		return NULL;
	x = xcalloc(1, sizeof(*x));
	x->doc = doc;
	if (!(x->ctx = xmlXPathNewContext(doc))) {
		virt_xml_free(x);
		return NULL;
	}
	return x;
}

struct virt_xml *virt_xml_parse(const char *xml)
{
	return parse(xml, 0);
}

void virt_xml_free(struct virt_xml *x)
{
	if (!x)
		return;
	xmlXPathFreeContext(x->ctx);
	xmlFreeDoc(x->doc);
	free(x);
}

int virt_xml_doc_string(struct virt_xml *x, const char *expr, char **ret)
{
	xmlXPathObjectPtr o = x ? xmlXPathEvalExpression((const xmlChar *)expr, x->ctx) : NULL;
	int r = -EINVAL;

	*ret = NULL;
	if (o && o->type == XPATH_STRING) {
		if (o->stringval && *o->stringval)
			*ret = xstrdup((const char *)o->stringval);
		r = 0;
	}
	xmlXPathFreeObject(o);
	return r;
}

int virt_xml_doc_has(struct virt_xml *x, const char *expr, const char *value)
{
	xmlXPathObjectPtr o = x ? xmlXPathEvalExpression((const xmlChar *)expr, x->ctx) : NULL;
	int r = -EINVAL;

	if (o && o->type == XPATH_NODESET) {
		r = 0;
		for (int i = 0; o->nodesetval && i < o->nodesetval->nodeNr && !r; i++) {
			xmlChar *s = xmlXPathCastNodeToString(o->nodesetval->nodeTab[i]);

			r = s && strcmp((const char *)s, value) == 0;
			xmlFree(s);
		}
	}
	xmlXPathFreeObject(o);
	return r;
}

int virt_xml_string(const char *xml, const char *expr, char **ret)
{
	_cleanup_(virt_xml_freep) struct virt_xml *x = virt_xml_parse(xml);

	return virt_xml_doc_string(x, expr, ret);
}

int virt_xml_has(const char *xml, const char *expr, const char *value)
{
	_cleanup_(virt_xml_freep) struct virt_xml *x = virt_xml_parse(xml);

	return virt_xml_doc_has(x, expr, value);
}

/* The one element expr names in xml, serialized without blanks, its name and its id; NULL if none. */
static xmlBufferPtr element_text(const char *xml, const char *expr)
{
	_cleanup_(virt_xml_freep) struct virt_xml *x = parse(xml, XML_PARSE_NOBLANKS);
	xmlXPathObjectPtr o = x ? xmlXPathEvalExpression((const xmlChar *)expr, x->ctx) : NULL;
	xmlBufferPtr buf = NULL;
	xmlAttrPtr id;
	xmlNodePtr n;

	if (o && o->type == XPATH_NODESET && o->nodesetval && o->nodesetval->nodeNr == 1 &&
	    (n = o->nodesetval->nodeTab[0])->type == XML_ELEMENT_NODE) {
		if ((id = xmlHasProp(n, (const xmlChar *)"id")))
			xmlRemoveProp(id);
		xmlNodeSetName(n, (const xmlChar *)"element");
		if ((buf = xmlBufferCreate()) && xmlNodeDump(buf, x->doc, n, 0, 0) < 0) {
			xmlBufferFree(buf);
			buf = NULL;
		}
	}
	xmlXPathFreeObject(o);
	return buf;
}

int virt_xml_same_element(const char *xml_a, const char *expr_a, const char *xml_b, const char *expr_b)
{
	xmlBufferPtr a = element_text(xml_a, expr_a), b = a ? element_text(xml_b, expr_b) : NULL;
	int r = -EINVAL;

	if (a && b)
		r = xmlBufferLength(a) == xmlBufferLength(b) &&
		    memcmp(xmlBufferContent(a), xmlBufferContent(b), (size_t)xmlBufferLength(a)) == 0;
	if (a)
		xmlBufferFree(a);
	if (b)
		xmlBufferFree(b);
	return r;
}
