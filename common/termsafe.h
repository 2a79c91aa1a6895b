/*
 * termsafe: bytes from a guest made safe to show on the operator's terminal.
 * A guest's console may hold escape sequences that move the cursor, retitle
 * the window, rewrite the screen or (on some terminals) answer back into the
 * terminal's input; only text, newlines and tabs pass unchanged.
 */
#ifndef FLEET_TERMSAFE_H
#define FLEET_TERMSAFE_H

#include <stddef.h>

/*
 * A copy of in[0..len) in which valid UTF-8 text, '\n', '\t' and "\r\n" are
 * kept and everything else is shown in a visible form: C0 controls and DEL
 * as ^X (ESC as "^["), C1 controls (U+0080-U+009F) as "\u009b", and bytes
 * that are not valid UTF-8 (including a raw 8-bit CSI 0x9b) as "\x9b".
 * NUL-terminated; *out_len (if not NULL) gets its length. The caller frees
 * it. Cannot fail (allocation failure aborts).
 */
char *term_sanitize(const void *in, size_t len, size_t *out_len);

#endif
