//! The hard catalogue's vocabulary: brands, product lines, modifiers and per category its
//! items with every way the catalogue's writers spell them. Data only.

/// Brands: each is carried by thousands of products across every category.
pub(super) const HARD_BRANDS: &[&str] = &[
    "Acme",
    "Northwind",
    "Bluefin",
    "Oakridge",
    "Lumen",
    "Kestrel",
    "Harbor",
    "Fjord",
    "Tandem",
    "Pioneer",
    "Solace",
    "Meridian",
    "Cobalt",
    "Juniper",
    "Sable",
    "Tidewater",
    "Vantage",
    "Aurora",
    "Granite Peak",
    "Hollow",
    "Evergreen",
    "Redwood",
    "Stellar",
    "Nimbus",
    "Atlas",
    "Summit",
    "Polaris",
    "Cascade",
    "Falcon",
    "Orion",
    "Zephyr",
    "Boreal",
    "Halcyon",
    "Ironbark",
    "Larkspur",
    "Mistral",
    "Nomad",
    "Quarry",
    "Sierra",
    "Willow",
];

/// Product lines: a line word is shared by every brand and category.
pub(super) const HARD_LINES: &[&str] = &[
    "Classic",
    "Sport",
    "Pro",
    "Urban",
    "Trail",
    "Essential",
    "Active",
    "Comfort",
    "Heritage",
    "Studio",
    "Motion",
    "Core",
    "Prime",
    "Elite",
    "Basic",
    "Signature",
    "Vintage",
    "Modern",
    "Outdoor",
    "Travel",
    "Daily",
    "Premium",
    "Select",
    "Original",
    "Performance",
    "Lite",
    "Max",
    "Plus",
    "Ultra",
    "Air",
    "Flex",
    "Soft",
    "Pure",
    "Natural",
    "Fresh",
    "Bold",
    "Smart",
    "Eco",
    "Street",
    "Coast",
    "Alpine",
    "Ridge",
    "Harvest",
    "Nordic",
    "Metro",
    "Pacific",
    "Atlantic",
    "Highland",
    "Canyon",
    "Prairie",
    "Tundra",
    "Delta",
    "Vista",
    "Horizon",
    "Pulse",
    "Echo",
    "Fusion",
    "Zen",
    "Spark",
    "Glide",
    "Rally",
    "Venture",
    "Quest",
    "Legacy",
    "Crest",
    "Apex",
    "Nova",
    "Terra",
    "Aqua",
    "Solar",
    "Lunar",
    "Breeze",
    "Drift",
    "Ember",
    "Frost",
    "Grove",
    "Haven",
    "Isle",
    "Jet",
    "Keystone",
];

/// Modifiers, one slot of the family identity; the first, empty, means "none".
pub(super) const HARD_MODIFIERS: &[&str] = &[
    "",
    "Slim",
    "Relaxed",
    "Hooded",
    "Insulated",
    "Lightweight",
    "Heavy Duty",
    "Compact",
    "Deluxe",
    "Mini",
    "Grand",
    "Double",
    "Twin",
    "Thermal",
    "Waterproof",
    "Quick Dry",
    "Breathable",
    "Stretch",
    "Ribbed",
    "Padded",
    "Quilted",
    "Extra Long",
    "Wide",
    "Tall",
    "Foldable",
];

/// One item as the catalogue's writers spell it: every spelling is the same item.
pub(super) struct Item {
    pub(super) spellings: &'static [&'static str],
    /// The plural, written instead of the singular in some names.
    pub(super) plural: &'static str,
}

pub(super) struct HardCategory {
    pub(super) path: &'static [&'static str],
    pub(super) items: &'static [Item],
    pub(super) price: i64,
    /// How a variant differs: 0 colour and size, 1 colour, 2 volume, 3 weight / pack, 4 length.
    pub(super) axis: u8,
}

pub(super) const HARD_CATEGORIES: &[HardCategory] = &[
    HardCategory {
        path: &["Apparel", "Tops"],
        items: &[
            Item {
                spellings: &["T-Shirt", "Tshirt", "T Shirt", "T-SHIRT", "t-shirt"],
                plural: "T-Shirts",
            },
            Item {
                spellings: &["Hoodie", "HOODIE", "hoodie"],
                plural: "Hoodies",
            },
            Item {
                spellings: &["Jacket", "JACKET"],
                plural: "Jackets",
            },
            Item {
                spellings: &["Sweater", "sweater"],
                plural: "Sweaters",
            },
            Item {
                spellings: &["Polo Shirt", "Polo-Shirt", "Poloshirt"],
                plural: "Polo Shirts",
            },
            Item {
                spellings: &["Jogger", "Jogger"],
                plural: "Joggers",
            },
        ],
        price: 3500,
        axis: 0,
    },
    HardCategory {
        path: &["Footwear"],
        items: &[
            Item {
                spellings: &["Running Shoe", "running shoe"],
                plural: "Running Shoes",
            },
            Item {
                spellings: &["Sneaker", "SNEAKER"],
                plural: "Sneakers",
            },
            Item {
                spellings: &["Boot", "boot"],
                plural: "Boots",
            },
            Item {
                spellings: &["Sandal", "Sandal"],
                plural: "Sandals",
            },
            Item {
                spellings: &["Slipper", "Slipper"],
                plural: "Slippers",
            },
            Item {
                spellings: &["Flip-Flop", "Flip Flop", "Flipflop"],
                plural: "Flip-Flops",
            },
        ],
        price: 7000,
        axis: 1,
    },
    HardCategory {
        path: &["Home", "Kitchen"],
        items: &[
            Item {
                spellings: &["Water Bottle", "Water-Bottle", "Waterbottle"],
                plural: "Water Bottles",
            },
            Item {
                spellings: &["Travel Mug", "Travel-Mug"],
                plural: "Travel Mugs",
            },
            Item {
                spellings: &["Lunch Box", "Lunchbox", "Lunch-Box"],
                plural: "Lunch Boxes",
            },
            Item {
                spellings: &["Food Container", "food container"],
                plural: "Food Containers",
            },
            Item {
                spellings: &["Flask", "FLASK"],
                plural: "Flasks",
            },
            Item {
                spellings: &["Tumbler", "tumbler"],
                plural: "Tumblers",
            },
        ],
        price: 2200,
        axis: 2,
    },
    HardCategory {
        path: &["Grocery"],
        items: &[
            Item {
                spellings: &["Coffee Bean", "coffee bean"],
                plural: "Coffee Beans",
            },
            Item {
                spellings: &["Herbal Tea", "Herbal-Tea"],
                plural: "Herbal Teas",
            },
            Item {
                spellings: &["Granola", "GRANOLA"],
                plural: "Granolas",
            },
            Item {
                spellings: &["Peanut Butter", "Peanut-Butter"],
                plural: "Peanut Butters",
            },
            Item {
                spellings: &["Oat Cereal", "oat cereal"],
                plural: "Oat Cereals",
            },
            Item {
                spellings: &["Protein Bar", "Protein-Bar"],
                plural: "Protein Bars",
            },
        ],
        price: 900,
        axis: 3,
    },
    HardCategory {
        path: &["Beauty", "Care"],
        items: &[
            Item {
                spellings: &["Face Cream", "Face-Cream", "Facecream"],
                plural: "Face Creams",
            },
            Item {
                spellings: &["Body Lotion", "body lotion"],
                plural: "Body Lotions",
            },
            Item {
                spellings: &["Shampoo", "SHAMPOO"],
                plural: "Shampoos",
            },
            Item {
                spellings: &["Conditioner", "conditioner"],
                plural: "Conditioners",
            },
            Item {
                spellings: &["Hand Soap", "Handsoap", "Hand-Soap"],
                plural: "Hand Soaps",
            },
            Item {
                spellings: &["Shower Gel", "Shower-Gel"],
                plural: "Shower Gels",
            },
        ],
        price: 1500,
        axis: 2,
    },
    HardCategory {
        path: &["Electronics", "Accessories"],
        items: &[
            Item {
                spellings: &["USB-C Cable", "USB C Cable", "usbc cable"],
                plural: "USB-C Cables",
            },
            Item {
                spellings: &["Phone Case", "Phone-Case", "Phonecase"],
                plural: "Phone Cases",
            },
            Item {
                spellings: &["Wireless Charger", "wireless charger"],
                plural: "Wireless Chargers",
            },
            Item {
                spellings: &["Power Bank", "Powerbank", "Power-Bank"],
                plural: "Power Banks",
            },
            Item {
                spellings: &["Earbud", "Ear Bud", "Ear-Bud"],
                plural: "Earbuds",
            },
            Item {
                spellings: &["Screen Protector", "Screen-Protector"],
                plural: "Screen Protectors",
            },
        ],
        price: 2500,
        axis: 4,
    },
];
