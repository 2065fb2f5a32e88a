/* Prints one entry of agent/src/pystack/layouts.rs: where CPython keeps what the agent's stack reader needs, for
 * the interpreter whose headers this is compiled against (scripts/gen-pylayouts: one build per version, with the
 * internal headers, Py_BUILD_CORE). Offsets in bytes on this ABI (x86_64 Linux, release build). */
#define Py_BUILD_CORE 1
#include <Python.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#if PY_VERSION_HEX >= 0x030B0000
#include "internal/pycore_frame.h"
#include "internal/pycore_code.h"
#else
#include "frameobject.h"
#endif
#if PY_VERSION_HEX >= 0x030D0000
#include "internal/pycore_tstate.h"
#endif
#include "internal/pycore_interp.h"

/* The bits of PyASCIIObject.state that hold `field`: bitfields have no offsetof. */
static unsigned state_bits(int field) {
    PyASCIIObject o;
    memset(&o, 0, sizeof o);
    if (field == 0) o.state.kind = 7;
    else if (field == 1) o.state.compact = 1;
    else o.state.ascii = 1;
    unsigned v;
    memcpy(&v, &o.state, sizeof v);
    return v;
}

#define OPT(x) printf("Some(%zu)", (size_t)(x))
#define NONE() printf("None")

int main(void) {
    printf("    Layout {\n        minor: %d,\n", PY_MINOR_VERSION);
#if PY_VERSION_HEX >= 0x030D0000
    printf("        tstate_frame: %zu,\n        cframe_frame: ", offsetof(PyThreadState, current_frame)); NONE();
#elif PY_VERSION_HEX >= 0x030B0000
    printf("        tstate_frame: %zu,\n        cframe_frame: ", offsetof(PyThreadState, cframe)); OPT(offsetof(_PyCFrame, current_frame));
#else
    printf("        tstate_frame: %zu,\n        cframe_frame: ", offsetof(PyThreadState, frame)); NONE();
#endif
    printf(",\n        tstate_next: %zu,\n        tstate_interp: %zu,\n", offsetof(PyThreadState, next), offsetof(PyThreadState, interp));
#if PY_VERSION_HEX >= 0x030B0000
    printf("        interp_threads_head: %zu,\n", offsetof(PyInterpreterState, threads.head));
#else
    printf("        interp_threads_head: %zu,\n", offsetof(PyInterpreterState, tstate_head));
#endif
#if PY_VERSION_HEX >= 0x030B0000
    printf("        frame_back: %zu,\n", offsetof(_PyInterpreterFrame, previous));
#if PY_VERSION_HEX >= 0x030D0000
    printf("        frame_code: %zu,\n        frame_instr: %zu,\n", offsetof(_PyInterpreterFrame, f_executable), offsetof(_PyInterpreterFrame, instr_ptr));
#else
    printf("        frame_code: %zu,\n        frame_instr: %zu,\n", offsetof(_PyInterpreterFrame, f_code), offsetof(_PyInterpreterFrame, prev_instr));
#endif
    printf("        frame_owner: "); OPT(offsetof(_PyInterpreterFrame, owner));
    printf(",\n        code_qualname: "); OPT(offsetof(PyCodeObject, co_qualname));
    printf(",\n        code_linetable: %zu,\n        code_adaptive: ", offsetof(PyCodeObject, co_linetable)); OPT(offsetof(PyCodeObject, co_code_adaptive));
#else
    printf("        frame_back: %zu,\n        frame_code: %zu,\n        frame_instr: %zu,\n", offsetof(PyFrameObject, f_back), offsetof(PyFrameObject, f_code), offsetof(PyFrameObject, f_lasti));
    printf("        frame_owner: "); NONE();
    printf(",\n        code_qualname: "); NONE();
#if PY_VERSION_HEX >= 0x030A0000
    printf(",\n        code_linetable: %zu,\n        code_adaptive: ", offsetof(PyCodeObject, co_linetable)); NONE();
#else
    printf(",\n        code_linetable: %zu,\n        code_adaptive: ", offsetof(PyCodeObject, co_lnotab)); NONE();
#endif
#endif
    printf(",\n        code_filename: %zu,\n        code_name: %zu,\n        code_firstlineno: %zu,\n",
           offsetof(PyCodeObject, co_filename), offsetof(PyCodeObject, co_name), offsetof(PyCodeObject, co_firstlineno));
    printf("        ob_type: %zu,\n        bytes_size: %zu,\n        bytes_data: %zu,\n", offsetof(PyObject, ob_type),
           offsetof(PyVarObject, ob_size), offsetof(PyBytesObject, ob_sval));
    printf("        str_length: %zu,\n        str_state: %zu,\n        str_ascii_size: %zu,\n        str_compact_size: %zu,\n",
           offsetof(PyASCIIObject, length), offsetof(PyASCIIObject, state), sizeof(PyASCIIObject), sizeof(PyCompactUnicodeObject));
    printf("        state_kind: 0x%x,\n        state_compact: 0x%x,\n        state_ascii: 0x%x,\n    },\n", state_bits(0),
           state_bits(1), state_bits(2));
    return 0;
}
