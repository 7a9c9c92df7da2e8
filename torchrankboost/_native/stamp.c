/* Compiled into every library of torchrankboost (see _native/build.py): which version of its
 * source the library was built from, so that the loader never runs kernels of another one. */
#ifndef TRB_BUILD_STAMP
#error "build with -DTRB_BUILD_STAMP=\"<stamp of the source>\""
#endif

const char *trb_build_stamp(void) { return "trb-build-stamp:" TRB_BUILD_STAMP; }
