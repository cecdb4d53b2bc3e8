// Image classification data as the programs use it: the training and test splits of one folder
// of four IDX files, checked against each other, with the class names and input statistics that
// travel with a model trained on them. Knows the datasets people start with (MNIST,
// Fashion-MNIST); any other folder in the same layout works as "idx".
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace ember::data {

// How a photo is turned into a sample like the dataset's own (the programs implement them):
//   digit    MNIST's recipe: crop to the ink, fit into 20/28 of the field, centre by mass
//   article  Fashion-MNIST's: trim the background, fit the longer side to the field, centre
//   plain    resize the whole picture to the field
// Light backgrounds are inverted in every case, the datasets being light-on-dark.
struct DatasetSpec {
  std::string name;                      // "mnist", "fashion-mnist", "idx"
  std::string title;                     // "MNIST", "Fashion-MNIST", "IDX images"
  std::vector<std::string> class_names;  // empty: named by number (or by classes.txt)
  bool has_normalization = false;        // the published mean and std; else measured on the data
  Normalization normalization;
  std::string preprocess;      // digit, article or plain
  std::string default_folder;  // empty: --data is required
  std::string how_to_get;      // appended to a missing-file error
};

// The spec of a known dataset; a ValueError listing the known names otherwise.
const DatasetSpec& dataset_spec(const std::string& name);
std::vector<std::string> dataset_names();

// The folder a dataset is read from: `given` when not empty; for mnist, $MNIST_DIR when set; else
// the spec's default folder (empty for idx, and for a name that is not a known dataset).
std::string data_folder(const std::string& dataset, const std::string& given);

struct ClassificationData {
  DatasetSpec spec;
  std::string folder;
  std::shared_ptr<IdxDataset> train, test;
  std::int64_t num_classes = 0;          // the largest training label + 1
  std::vector<std::string> class_names;  // num_classes names
  Normalization normalization;           // the dataset's mean and std of pixel/255
};

// Reads both splits from `folder` and checks that they belong together: the same image size, no
// test label beyond the training set's classes, and class names (from `classes.txt` beside the
// files, one per line, when present; else the spec's; else the numbers) for every class. Each
// problem is a FormatError naming the file.
ClassificationData load_classification(const std::string& folder, const DatasetSpec& spec);

// The mean and standard deviation of pixel/255 over every pixel of `dataset`.
Normalization pixel_statistics(const IdxDataset& dataset);

}  // namespace ember::data
