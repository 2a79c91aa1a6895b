/*
 * virt_xml: reading libvirt's definitions (domain, network, volume XML)
 * with libxml2's parser and XPath, never by searching their text: an
 * attribute's quoting, order, spacing or an element elsewhere in the
 * document must not change what fleet reads. Parsed with no network and
 * no entity expansion. libc and libxml2 only.
 */
#ifndef FLEET_VM_VIRT_XML_H
#define FLEET_VM_VIRT_XML_H

#include <stdbool.h>

/* A parsed document, asked several questions with one parse; virt_xml_free() frees it. */
struct virt_xml;

/* xml parsed: a new document, or NULL when it is not XML (or larger than any libvirt sends). */
struct virt_xml *virt_xml_parse(const char *xml);
void virt_xml_free(struct virt_xml *x);
static inline void virt_xml_freep(struct virt_xml **x) { virt_xml_free(*x); }

/* virt_xml_string and virt_xml_has over a parsed document; -EINVAL also when x is NULL. */
int virt_xml_doc_string(struct virt_xml *x, const char *expr, char **ret);
int virt_xml_doc_has(struct virt_xml *x, const char *expr, const char *value);

/*
 * The string value of XPath expression expr over xml (e.g.
 * "string(/domain/@type)"): 0 with *ret a copy the caller frees, NULL
 * when the value is empty; -EINVAL when xml is not XML or expr not XPath.
 */
int virt_xml_string(const char *xml, const char *expr, char **ret);

/*
 * Whether a node of node-set expression expr over xml (e.g.
 * "/domain/devices/disk/source/@file") has exactly the string value
 * value: 1 or 0; -EINVAL when xml is not XML or expr not a node set.
 * The value is compared here, never quoted into the expression.
 */
int virt_xml_has(const char *xml, const char *expr, const char *value);

/*
 * Whether the element expr_a names in xml_a and the one expr_b names in
 * xml_b hold the same definition: 1 or 0. Compared as parsed: blank text
 * between elements, attribute quoting and the two top elements' own names
 * and "id" attributes (libvirt numbers each run of a domain) do not count.
 * -EINVAL when either is not XML or its expression names not exactly one
 * element.
 */
int virt_xml_same_element(const char *xml_a, const char *expr_a, const char *xml_b, const char *expr_b);

#endif
