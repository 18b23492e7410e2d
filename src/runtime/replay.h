/* Stream-graph replay: a context records each run of device kernels that needs nothing from
 * the host between them (a segment) into a stream graph on its second run at a resolution
 * (the first is the warm-up: kernels make their per-context state, workspaces reach their
 * size), and launches the graph instead of enqueuing the kernels on every run after that.
 * Copies and host nodes stay outside graphs, so graph inputs and outputs, wherever they are
 * bound, go through the executor as before. Graphs are dropped when the context resolves
 * again (new shapes) or an arena moves. Used only where the backend offers capture (its
 * capture_* slots; the CUDA module leaves them out under KILN_CUDA_GRAPHS=0), and not while
 * a context profiles its layers or captures values (every node must then run by itself). */
#ifndef KN_REPLAY_H
#define KN_REPLAY_H

#include "runtime/engine.h"

/* Start of a run: refresh the segments if the context resolved again since the last run. */
kiln_status kn_replay_start(kiln_context *c);
/* Before node i. When a recorded segment starts at i, launches its graph and sets *next to
 * the node after it; otherwise *next = i (and a capture may have begun at i). */
kiln_status kn_replay_before(kiln_context *c, int i, int *next);
/* After node i ran: ends the capture of the segment ending at i and launches its graph. When
 * the recording failed, *restart is the segment's first node (run it again, plainly: nothing
 * of it ran); else -1. */
kiln_status kn_replay_after(kiln_context *c, int i, int *restart);
/* A kernel failed while its segment was being recorded: ends the capture, marks the segment
 * to run plainly and returns true with *restart = its first node (to run it again, plainly);
 * false when nothing was being recorded. */
bool kn_replay_abort(kiln_context *c, int *restart);
/* Drop every graph (the context's streams are idle). */
void kn_replay_destroy(kiln_context *c);

#endif
