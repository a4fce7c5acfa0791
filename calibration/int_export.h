/* A model quantized layer by layer straight into an INTn artifact folder
 * (formats/int_writer.h): the driver's emit callback streams each finished
 * layer to the writer, so memory stays near one layer. */
#ifndef DSQ_CALIBRATION_INT_EXPORT_H
#define DSQ_CALIBRATION_INT_EXPORT_H

#include "calibration/sequential.h"
#include "core/fileio.h"
#include "formats/int_writer.h"

/* Quantizes m with o (its emit/user are taken over) and writes the folder
 * into d's temporary path; the caller commits or aborts d. spec's bits,
 * group and sym should be o->q's. keep as in dsq_seq_quantize. */
dsq_status dsq_int_export(dsq_model *m, const dsq_calib_set *calib, const dsq_seq_opts *o, const dsq_int_spec *spec,
                          const dsq_outdir *d, dsq_seq_report *rep, dsq_seq_keep **keep);

#endif
