/* virt_xml: see virt_xml.h. */
#include "vm/virt_xml.h"

#include <errno.h>
#include <libxml/parser.h>
#include <libxml/xpath.h>
#include <string.h>

#include "common/util.h"

#define XML_MAX (16 << 20)	/* libvirt's own limit on an RPC string is lower */

/* The expression evaluated over xml: the object (caller frees with its context and document), or NULL. */
static xmlXPathObjectPtr eval(const char *xml, const char *expr, xmlDocPtr *doc, xmlXPathContextPtr *ctx)
{
	size_t len = strlen(xml);

	*ctx = NULL;
	*doc = len <= XML_MAX ? xmlReadMemory(xml, (int)len, NULL, NULL, XML_PARSE_NONET | XML_PARSE_NOERROR |
					      XML_PARSE_NOWARNING) : NULL;
	if (!*doc || !(*ctx = xmlXPathNewContext(*doc)))
		return NULL;
	return xmlXPathEvalExpression((const xmlChar *)expr, *ctx);
}

static void eval_free(xmlXPathObjectPtr o, xmlDocPtr doc, xmlXPathContextPtr ctx)
{
	xmlXPathFreeObject(o);
	xmlXPathFreeContext(ctx);
	xmlFreeDoc(doc);
}

int virt_xml_string(const char *xml, const char *expr, char **ret)
{
	xmlDocPtr doc;
	xmlXPathContextPtr ctx;
	xmlXPathObjectPtr o = eval(xml, expr, &doc, &ctx);
	int r = -EINVAL;

	*ret = NULL;
	if (o && o->type == XPATH_STRING) {
		if (o->stringval && *o->stringval)
			*ret = xstrdup((const char *)o->stringval);
		r = 0;
	}
	eval_free(o, doc, ctx);
	return r;
}

int virt_xml_has(const char *xml, const char *expr, const char *value)
{
	xmlDocPtr doc;
	xmlXPathContextPtr ctx;
	xmlXPathObjectPtr o = eval(xml, expr, &doc, &ctx);
	int r = -EINVAL;

	if (o && o->type == XPATH_NODESET) {
		r = 0;
		for (int i = 0; o->nodesetval && i < o->nodesetval->nodeNr && !r; i++) {
			xmlChar *s = xmlXPathCastNodeToString(o->nodesetval->nodeTab[i]);

			r = s && strcmp((const char *)s, value) == 0;
			xmlFree(s);
		}
	}
	eval_free(o, doc, ctx);
	return r;
}
