/* Prints one entry of agent/src/pystack/layouts.rs: where CPython keeps what the agent's stack reader needs, for
 * the interpreter whose headers this is compiled against (scripts/gen-pylayouts: one build per version, with the
 * internal headers, Py_BUILD_CORE). Offsets in bytes on this ABI (x86_64 Linux, release build). */
#define Py_BUILD_CORE 1
#include <Python.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#if PY_VERSION_HEX >= 0x030E0000
#include "internal/pycore_interpframe_structs.h"
#include "internal/pycore_stackref.h"
#endif
#if PY_VERSION_HEX >= 0x030B0000
#include "internal/pycore_frame.h"
#include "internal/pycore_code.h"
#else
#include "frameobject.h"
#endif
#if PY_VERSION_HEX >= 0x030D0000
#include "internal/pycore_gc.h" /* 3.13 free-threaded: pycore_tstate.h needs struct _gc_thread_state first */
#include "internal/pycore_tstate.h"
#include "internal/pycore_runtime.h"
#endif
#if PY_VERSION_HEX >= 0x030E0000
#include "internal/pycore_debug_offsets.h"
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
#ifdef Py_GIL_DISABLED
    printf("        free_threaded: true,\n");
#else
    printf("        free_threaded: false,\n");
#endif
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
    /* The first owner whose frames hold no code of their own: the C stack's entry frames (3.12, 3.13), the
     * interpreter's (3.14, then the C stack's after it). */
#if PY_VERSION_HEX >= 0x030E0000
    printf(",\n        owner_no_code: %d", (int)FRAME_OWNED_BY_INTERPRETER);
#elif PY_VERSION_HEX >= 0x030C0000
    printf(",\n        owner_no_code: %d", (int)FRAME_OWNED_BY_CSTACK);
#else
    printf(",\n        owner_no_code: 255");
#endif
    /* f_executable is a tagged _PyStackRef from 3.14: the tag bits to clear for the object's address. */
#if PY_VERSION_HEX >= 0x030E0000
    printf(",\n        executable_tag_bits: %d", (int)Py_TAG_BITS);
#else
    printf(",\n        executable_tag_bits: 0");
#endif
    /* Free-threaded 3.14+: each thread runs its own copy of the bytecode (pycore_interpframe.h
     * _PyFrame_GetBytecode: co_tlbc->entries[f->tlbc_index]), which the instruction pointer points into. */
#if PY_VERSION_HEX >= 0x030E0000 && defined(Py_GIL_DISABLED)
    printf(",\n        frame_tlbc_index: "); OPT(offsetof(_PyInterpreterFrame, tlbc_index));
    printf(",\n        code_tlbc: "); OPT(offsetof(PyCodeObject, co_tlbc));
    printf(",\n        tlbc_entries: %zu", offsetof(_PyCodeArray, entries));
#else
    printf(",\n        frame_tlbc_index: "); NONE();
    printf(",\n        code_tlbc: "); NONE();
    printf(",\n        tlbc_entries: 0");
#endif
    printf(",\n        code_qualname: "); OPT(offsetof(PyCodeObject, co_qualname));
    printf(",\n        code_linetable: %zu,\n        code_adaptive: ", offsetof(PyCodeObject, co_linetable)); OPT(offsetof(PyCodeObject, co_code_adaptive));
#else
    printf("        frame_back: %zu,\n        frame_code: %zu,\n        frame_instr: %zu,\n", offsetof(PyFrameObject, f_back), offsetof(PyFrameObject, f_code), offsetof(PyFrameObject, f_lasti));
    printf("        frame_owner: "); NONE();
    printf(",\n        owner_no_code: 255,\n        executable_tag_bits: 0");
    printf(",\n        frame_tlbc_index: None,\n        code_tlbc: None,\n        tlbc_entries: 0");
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
    printf("        state_kind: 0x%x,\n        state_compact: 0x%x,\n        state_ascii: 0x%x,\n", state_bits(0),
           state_bits(1), state_bits(2));
    /* 3.13+: the interpreter describes itself at the start of _PyRuntime (_Py_DebugOffsets, for debuggers and
     * profilers): where in that description each offset above is, and the value it must have. The agent compares
     * them with the running interpreter's, so a build laid out otherwise (free-threaded, a patched or debug build)
     * records no stacks rather than wrong ones. */
#if PY_VERSION_HEX >= 0x030D0000
#define DBG(field, value) printf("            (%zu, %zu),\n", offsetof(_Py_DebugOffsets, field), (size_t)(value))
    printf("        debug_free_threaded: Some(%zu),\n        debug_checks: &[\n", offsetof(_Py_DebugOffsets, free_threaded));
    DBG(thread_state.next, offsetof(PyThreadState, next));
    DBG(thread_state.interp, offsetof(PyThreadState, interp));
    DBG(thread_state.current_frame, offsetof(PyThreadState, current_frame));
    DBG(interpreter_state.threads_head, offsetof(PyInterpreterState, threads.head));
    DBG(interpreter_frame.previous, offsetof(_PyInterpreterFrame, previous));
    DBG(interpreter_frame.executable, offsetof(_PyInterpreterFrame, f_executable));
    DBG(interpreter_frame.instr_ptr, offsetof(_PyInterpreterFrame, instr_ptr));
    DBG(interpreter_frame.owner, offsetof(_PyInterpreterFrame, owner));
    DBG(code_object.filename, offsetof(PyCodeObject, co_filename));
    DBG(code_object.name, offsetof(PyCodeObject, co_name));
    DBG(code_object.qualname, offsetof(PyCodeObject, co_qualname));
    DBG(code_object.linetable, offsetof(PyCodeObject, co_linetable));
    DBG(code_object.firstlineno, offsetof(PyCodeObject, co_firstlineno));
    DBG(code_object.co_code_adaptive, offsetof(PyCodeObject, co_code_adaptive));
    DBG(pyobject.ob_type, offsetof(PyObject, ob_type));
    DBG(bytes_object.ob_size, offsetof(PyVarObject, ob_size));
    DBG(bytes_object.ob_sval, offsetof(PyBytesObject, ob_sval));
    DBG(unicode_object.length, offsetof(PyASCIIObject, length));
    DBG(unicode_object.state, offsetof(PyASCIIObject, state));
    DBG(unicode_object.asciiobject_size, sizeof(PyASCIIObject));
#if PY_VERSION_HEX >= 0x030E0000 && defined(Py_GIL_DISABLED)
    DBG(interpreter_frame.tlbc_index, offsetof(_PyInterpreterFrame, tlbc_index));
    DBG(code_object.co_tlbc, offsetof(PyCodeObject, co_tlbc));
#endif
    printf("        ],\n");
#else
    printf("        debug_free_threaded: None,\n        debug_checks: &[],\n");
#endif
    printf("    },\n");
    return 0;
}
